"""The paper-reported numbers schema (benchmark/records/reference.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmark.records.reference import (
    ReferenceError,
    load_references,
    parse_reference,
    parse_value,
)

DOC = {
    "source": "Paper",
    "table": "Table 1",
    "metric": "top1",
    "unit": "percent",
    "selection": "final",
    "settings": {"dataset": "cifar10"},
    "columns": [
        {"label": "a", "card": "linear/x", "settings": {"alpha": 0.1}},
        {"label": "b", "card": "knn@v1", "card_id": "abc", "selection": "best_epoch_test"},
    ],
    "rows": [
        {
            "label": "f-SimCLR",
            "method": "fedavg_simclr",
            "settings": {"alpha": 1.0},
            "values": ["58.36±0.19", None],
        },
        {"label": "other", "values": ["34.9?", 12]},
    ],
}


def test_parse_value_forms() -> None:
    assert parse_value("58.36±0.19", "x") == (58.36, 0.19, False)
    assert parse_value("34.9?", "x") == (34.9, None, True)
    assert parse_value(12, "x") == (12.0, None, False)
    assert parse_value("-", "x") is None and parse_value(None, "x") is None
    with pytest.raises(ReferenceError):
        parse_value("high", "x")
    with pytest.raises(ReferenceError):
        parse_value(True, "x")


def test_parse_reference_merges_settings_and_flags_selection() -> None:
    table = parse_reference(DOC)
    assert len(table.values) == 3  # the null is "not reported"
    first = table.values[0]
    assert (first.mean, first.std, first.method, first.card) == (
        58.36,
        0.19,
        "fedavg_simclr",
        "linear/x",
    )
    assert first.settings == {"dataset": "cifar10", "alpha": 1.0}  # file < column < row
    assert first.task == "linear" and not first.selects_on_test
    last = table.values[-1]
    assert (
        last.card_id == "abc"
        and last.selects_on_test
        and last.task == "knn"
        and last.display == "12"
    )
    assert table.values[1].uncertain and table.values[1].display == "34.9?"


@pytest.mark.parametrize(
    "patch, match",
    [
        ({"colour": "red"}, "unknown keys"),
        ({"unit": "furlongs"}, "unit"),
        ({"selection": "best"}, "selection"),
        ({"rows": [{"label": "x", "values": [1]}]}, "1 values for 2 columns"),
        ({"rows": [{"label": "x", "method": "Fed EMA", "values": [1, 2]}]}, "registry name"),
    ],
)
def test_invalid_documents_raise(patch: dict, match: str) -> None:
    with pytest.raises(ReferenceError, match=match):
        parse_reference({**DOC, **patch})


def test_missing_card_raises() -> None:
    doc = {**DOC, "columns": [{"label": "a"}, {"label": "b", "card": "c"}]}
    with pytest.raises(ReferenceError, match="no protocol card"):
        parse_reference(doc)


def test_load_references_never_raises(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("source: [unclosed")
    (tmp_path / "wrong.yaml").write_text("source: x\n")
    (tmp_path / "ok.yaml").write_text(
        "source: P\ntable: T\nmetric: top1\nunit: fraction\nselection: final\n"
        "columns: [{label: a, card: linear/x}]\nrows: [{label: r, values: [0.70]}]\n"
    )
    good, bad = load_references(tmp_path)
    assert [t.path.name for t in good] == ["ok.yaml"] and good[0].values[0].display == "0.70"
    assert sorted(p.name for p, _ in bad) == ["bad.yaml", "wrong.yaml"]


def test_plugin_reference_tables_are_found_through_their_entry_point(
    tmp_path: Path, monkeypatch
) -> None:
    """A plugin's paper numbers reach the site without editing this repository: its package of YAML
    tables, named in the ``fssl_bench.references`` entry-point group, is read with the repository's
    own; a name that is no package is reported, not raised; and only the default site looks."""
    import shutil
    import sys
    from importlib import metadata

    from benchmark.records.reference import REFERENCE_GROUP

    pkg = tmp_path / "site" / "fssl_fedx_refs"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    repo = Path(__file__).resolve().parents[2]
    shutil.copy(repo / "results" / "reference" / "flesd_table4.yaml", pkg / "fedx_table1.yaml")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    eps = [
        metadata.EntryPoint("fedx", "fssl_fedx_refs", REFERENCE_GROUP),
        metadata.EntryPoint("broken", "no_such_pkg_33", REFERENCE_GROUP),
    ]
    monkeypatch.setattr(
        metadata, "entry_points", lambda group=None: [e for e in eps if e.group == group]
    )
    empty = tmp_path / "refs"
    empty.mkdir()
    good, bad = load_references(empty, plugins=True)
    assert [t.path for t in good] == [pkg / "fedx_table1.yaml"] and good[0].table == "Table 4"
    assert [str(p) for p, _ in bad] == [f"{REFERENCE_GROUP}:broken"]
    assert load_references(empty) == ([], [])
    assert "no_such_pkg_33" not in sys.modules
