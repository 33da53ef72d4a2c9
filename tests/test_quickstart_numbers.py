"""The README's and docs/quickstart.md's tables of the embedded default are the shipped records'
(``benchmarks/quickstart_table.py``): a re-made record, or a hand-edited cell, fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _tables() -> list[str]:
    spec = importlib.util.spec_from_file_location(
        "quickstart_table", REPO / "benchmarks" / "quickstart_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [line for line in module.tables(REPO / "results").splitlines() if line.startswith("|")]


def _rows(lines: list[str]) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_docs_quickstart_tables_are_the_shipped_records() -> None:
    page = (REPO / "docs" / "quickstart.md").read_text()
    rows = _tables()
    assert len(rows) > 10
    for line in rows:
        assert line in page, f"docs/quickstart.md lacks (or differs from) the row: {line}"


def test_readme_table_is_the_shipped_records() -> None:
    full = _rows(_tables())
    header = full.index(next(r for r in full if r[:3] == ["method", "backbone", "kNN iid"]))
    expected = [r[:6] + [r[10]] for r in full[header + 2 :] if len(r) == 11]
    readme = [
        r
        for r in _rows(
            [x for x in (REPO / "README.md").read_text().splitlines() if x.startswith("|")]
        )
        if len(r) == 7 and r[1] in {"resnet_micro", "vit_micro"}
    ]
    assert readme == expected
