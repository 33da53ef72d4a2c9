"""The README's and docs/quickstart.md's numbers of the embedded default are the shipped records'
(``scripts/quickstart_table.py``): a re-made record, a hand-edited table cell or prose that still
quotes an older set of records fails here."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORDS = {0: "no", 1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def _table_module():
    spec = importlib.util.spec_from_file_location(
        "quickstart_table", REPO / "scripts" / "quickstart_table.py"
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
        if len(r) == 7 and r[1] in {"resnet_micro", "vit_micro", "pixels"}
    ]
    assert readme == expected


def test_the_prose_quotes_the_shipped_records() -> None:
    facts = _table_module().fact_values(REPO / "results")
    text = (REPO / "docs" / "quickstart.md").read_text().splitlines()
    page = _flat("\n".join(line for line in text if not line.startswith("|")))  # the prose only
    margins = facts["margins"]
    for task, baseline, method, backbone in [
        ("knn", "no_pretrain", "central_ssl", "resnet_micro"),
        ("knn", "no_pretrain", "fedavg_simclr", "resnet_micro"),
        ("knn", "no_pretrain_bn", "fedavg_simclr", "resnet_micro"),
        ("finetune", "no_pretrain", "fedmae", "vit_micro"),
    ]:
        for part in ("iid", "dir 0.1"):
            quoted = margins[(task, baseline)][(method, backbone, part)]
            assert quoted in page, f"the prose does not quote {method} {part}: {quoted}"
    behind, pairs = len(facts["not_ahead"]), len(facts["pairs"])
    assert f"but {WORDS[behind]} of {pairs} pairs" in page
    ahead = sum(v > 0 for v in facts["fedmae_finetune"]["iid"].values())
    assert f"ahead on {ahead} of 3 seeds" in page
    a, b, c = (f"{v:.1f}" for v in facts["no_pretrain_knn"]["resnet_micro"])
    assert f"is {a}, {b} and {c} on seeds 0-2" in page
    iid, dirichlet = (f"{facts['calibration'][p]:+.1f}" for p in ("iid", "dir 0.1"))
    assert f"({iid} IID, {dirichlet} at α = 0.1)" in page


def test_the_pages_quote_what_the_input_itself_scores() -> None:
    """The input itself (``pixels``) is the first row of both tables, and the prose that says what
    the default cannot show quotes its numbers and holds only while every configuration is below
    it."""
    facts = _table_module().fact_values(REPO / "results")
    px = facts["pixels"]
    assert px, "the quickstart's records have no pixels cells: re-make them (docs/quickstart.md)"
    knn, linear = (f"{px[(task, 'iid')]:.1f}" for task in ("knn", "linear_probe"))
    page = _flat((REPO / "docs" / "quickstart.md").read_text())
    assert f"**{knn} kNN and {linear} linear, above every learned representation" in _flat(page)
    readme = _flat((REPO / "README.md").read_text())
    assert f"({knn} kNN against at most" in readme
    for task in ("knn", "linear_probe"):
        assert facts["below_pixels"][task] == facts["configs"], (
            f"a configuration beats pixels ({task})"
        )
