"""The README's and docs/quickstart.md's numbers of the embedded default are the shipped records'
(``benchmarks/quickstart_table.py``): a re-made record, a hand-edited table cell or prose that still
quotes an older set of records fails here."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORDS = {0: "no", 1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def _table_module():
    spec = importlib.util.spec_from_file_location(
        "quickstart_table", REPO / "benchmarks" / "quickstart_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tables() -> list[str]:
    text = _table_module().tables(REPO / "results")
    return [line for line in text.splitlines() if line.startswith("|")]


def _rows(lines: list[str]) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def _blocks(text: str) -> list[list[str]]:
    """Each markdown table of ``text`` as its list of lines."""
    blocks, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    return blocks


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("−", "-").replace("–", "-"))


def test_docs_quickstart_tables_are_the_shipped_records() -> None:
    lines = _tables()
    split = next(i for i, line in enumerate(lines[1:], 1) if line.startswith("| method"))
    expected = [lines[:split], lines[split:]]
    page = _blocks((REPO / "docs" / "quickstart.md").read_text())
    for block in expected:
        assert len(block) > 3
        assert block in page, "docs/quickstart.md has no table equal to:\n" + "\n".join(block)


def test_readme_table_is_the_shipped_records() -> None:
    full = _rows(_tables())
    header = full.index(next(r for r in full if r[:3] == ["method", "backbone", "kNN iid"]))
    expected = [r[:6] + [r[10]] for r in full[header + 2 :] if len(r) == 11]
    readme_lines = (REPO / "README.md").read_text().splitlines()
    readme = [
        r
        for r in _rows([x for x in readme_lines if x.startswith("|")])
        if len(r) == 7 and r[1] in {"resnet_micro", "vit_micro"}
    ]
    assert readme == expected


def test_the_prose_quotes_the_shipped_records() -> None:
    from leaderboard.margins import paired_margins

    module = _table_module()
    frame, _ = module._frame(REPO / "results")
    page = _flat((REPO / "docs" / "quickstart.md").read_text())
    knn = paired_margins(frame, task="knn", baseline="no_pretrain")
    bn = paired_margins(frame, task="knn", baseline="no_pretrain_bn")
    ft = paired_margins(frame, task="finetune", baseline="no_pretrain")

    def cell(table, method, partition):
        iid = table["partition"] == "iid"
        row = table[(table["method"] == method) & (iid if partition == "iid" else ~iid)].iloc[0]
        return row, f"{row['margin']:+.1f} [{row['ci_low']:+.1f}, {row['ci_high']:+.1f}]"

    dirichlet = "dirichlet 0.1"
    for table, method, part in [
        (knn, "central_ssl", "iid"),
        (knn, "fedavg_simclr", "iid"),
        (knn, "fedavg_simclr", dirichlet),
        (bn, "fedavg_simclr", "iid"),
        (bn, "fedavg_simclr", dirichlet),
        (ft, "fedmae", "iid"),
        (ft, "fedmae", dirichlet),
    ]:
        quoted = cell(table, method, part)[1]
        assert quoted in page, f"the prose does not quote {method} {part}: {quoted}"
    ssl = sorted(set(knn["method"]) - {"dec_sl", "no_pretrain_bn", "fedmae"})
    per_seed = [
        v for m in ssl for p in ("iid", dirichlet) for v in cell(knn, m, p)[0]["per_seed"].values()
    ]
    behind = sum(round(v, 1) <= 0 for v in per_seed)
    assert f"but {WORDS[behind]} of {len(per_seed)} pairs" in page
    ahead = sum(v > 0 for v in cell(ft, "fedmae", "iid")[0]["per_seed"].values())
    assert f"ahead on {ahead} of 3 seeds" in page
    rn = frame[(frame["method"] == "no_pretrain") & (frame["task"] == "knn")]
    rn = rn[(rn["backbone"] == "resnet_micro") & (rn["partition_name"] == "iid")].sort_values(
        "seed"
    )
    a, b, c = (f"{v:.1f}" for v in rn["value"])
    assert f"is {a}, {b} and {c} on seeds 0-2" in page
