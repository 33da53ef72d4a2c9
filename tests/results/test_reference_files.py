"""The committed paper-reported numbers (results/reference/*.yaml) load, and match the docs/ pages
they cite."""

from __future__ import annotations

import re
from pathlib import Path

from benchmark.records.reference import load_references

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "results" / "reference"


def test_every_reference_file_is_valid() -> None:
    good, bad = load_references(REFERENCE)
    assert not bad, bad
    names = {t.path.name for t in good}
    for required in (
        "decssl_table1_coco.yaml",
        "decssl_table2_transfer.yaml",
        "decssl_table4_stl10.yaml",
        "orchestra_table1.yaml",
        "flesd_table1.yaml",
        "fedmae_table1.yaml",
    ):
        assert required in names
    for t in good:
        assert t.values and t.source and t.table


def test_spot_values_exactly_as_the_specs_report_them() -> None:
    good, _ = load_references(REFERENCE)
    values = {
        (t.path.name, v.row, v.column, v.settings.get("dataset")): v for t in good for v in t.values
    }
    v = values[("orchestra_table1.yaml", "Orchestra", "CD Linear", "cifar10")]
    assert (v.mean, v.std, v.method, v.card, v.selects_on_test) == (
        71.58,
        0.53,
        "orchestra",
        "linear/orchestra",
        False,
    )
    v = values[("flesd_table1.yaml", "FLESD", "CIFAR-100 alpha=100", "cifar100")]
    assert (v.mean, v.selects_on_test) == (39.2, True)
    assert values[("decssl_table2_transfer.yaml", "Dec-SSL IID", "1 %", None)].display == "0.57"
    assert values[("fedmae_table1.yaml", "FedEMA", "INAT non-IID 10%", None)].mean == 0.16


def cited_sections(spec: str) -> list[tuple[str, str]]:
    """``"docs/methods/orchestra.md §5; docs/methods/fedavg_simclr.md §6"`` ->
    [(page, "5"), (page, "6")]."""
    return re.findall(r"(docs/[\w/]+\.md) §(\d+)", spec)


def section(page: Path, number: str) -> str:
    """The text under the heading ``## <number>. ...`` of a docs page, up to the next heading of
    that level."""
    text = page.read_text(encoding="utf-8")
    m = re.search(rf"(?ms)^## {re.escape(number)}\.\s.*?(?=^## |\Z)", text)
    assert m, f"{page.relative_to(REPO)} has no section §{number}"
    return m.group(0)


def test_every_number_appears_in_the_cited_docs_section() -> None:
    """Every value of every reference file is printed in the docs/ section its ``spec:`` field cites
    (the paper's table as a markdown table there); none is skipped."""
    good, _ = load_references(REFERENCE)
    checked = 0
    for t in good:
        cited = cited_sections(t.spec)
        assert cited, f"{t.path.name}: spec {t.spec!r} cites no docs/ section"
        text = " ".join(section(REPO / page, number) for page, number in cited)
        for v in t.values:
            token = v.text.rstrip("?")
            assert re.search(rf"(?<![\d.]){re.escape(token)}(?![\d])", text), (
                t.path.name,
                v.row,
                v.column,
                token,
            )
            checked += 1
    assert checked > 100
