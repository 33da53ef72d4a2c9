"""The one ``# DEVIATION`` parser (methods/README.md's table and the site's method pages both use
it)."""

from __future__ import annotations

from pathlib import Path

from benchmark.core.deviations import Deviation, deviations, parse_deviations


def test_continuation_lines_join_and_a_new_marker_starts_a_new_deviation() -> None:
    text = (
        "x = 1  # DEVIATION: the paper does A;\n# we do B because C.\ny = 2\n# not a deviation\n"
        "# DEVIATION: other\n#DEVIATION second marker right below\n"
    )
    assert parse_deviations(text) == [
        Deviation(1, "the paper does A; we do B because C."),
        Deviation(5, "other"),
        Deviation(6, "second marker right below"),
    ]


def test_an_unreadable_file_has_none(tmp_path: Path) -> None:
    assert deviations(tmp_path / "missing.py") == []


def test_both_consumers_use_it() -> None:
    import benchmark.commands.method_table as table
    from leaderboard import method_views

    assert table.deviations is deviations
    assert method_views.parse_deviations_of is deviations
