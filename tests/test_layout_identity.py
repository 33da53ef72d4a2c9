"""scripts/layout_identity.py (the proof that a refactor moved no number): what it compares, what it
drops and which table changes it accepts as intended, without git or a build."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def li():
    spec = importlib.util.spec_from_file_location(
        "layout_identity", REPO / "scripts" / "layout_identity.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["layout_identity"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _site(root: Path, pages: dict[str, str], csvs: dict[str, bytes]) -> Path:
    for rel, text in pages.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for rel, data in csvs.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


TRACK = '<p>x</p><table class="sortable sticky" id="track-table"><tr><td class="num{}" data-sort="1">1</td></tr></table>'


def test_identical_tables_and_csvs_pass_and_text_outside_tables_is_free(li, tmp_path: Path) -> None:
    a = _site(tmp_path / "a", {"tracks/t.html": TRACK.format("")}, {"csv/t.csv": b"1\n"})
    b = _site(
        tmp_path / "b", {"tracks/t.html": "<h1>new</h1>" + TRACK.format("")}, {"csv/t.csv": b"1\n"}
    )
    assert li.compare_sites(a, b) == ([], [])


def test_an_intended_change_is_listed_as_expected_and_any_other_fails(li, tmp_path: Path) -> None:
    a = _site(
        tmp_path / "a", {"tracks/t.html": TRACK.format(""), "index.html": TRACK.format("")}, {}
    )
    b = _site(
        tmp_path / "b",
        {"tracks/t.html": TRACK.format(" best"), "index.html": TRACK.format(" best")},
        {},
    )
    failures, expected = li.compare_sites(a, b)
    assert [e.split(":")[0] for e in expected] == ["tracks/t.html"]  # bold leader: track pages only
    assert len(failures) == 1 and failures[0].startswith("tables differ: index.html")


def test_a_changed_csv_or_a_missing_page_fails(li, tmp_path: Path) -> None:
    a = _site(tmp_path / "a", {"x.html": "<table>1</table>"}, {"csv/t.csv": b"1\n"})
    b = _site(tmp_path / "b", {}, {"csv/t.csv": b"2\n"})
    failures, _ = li.compare_sites(a, b)
    assert failures == ["page only in base: x.html", "CSV differs: csv/t.csv"]


def test_records_are_compared_without_machine_and_timing_fields(li) -> None:
    rec = {
        "cell_id": "c",
        "env": {"git_sha": "1"},
        "created_at": "now",
        "digest": "d",
        "compute": {"wall_time_s": 3.0, "client_steps": 5, "peak_mem_bytes": 9},
        "scores": [{"values": {"top1": 50.0}, "wall_time_s": 1.0}],
    }
    assert li.stable(rec) == {
        "cell_id": "c",
        "compute": {"client_steps": 5},
        "scores": [{"values": {"top1": 50.0}}],
    }


def test_issue_48_a_new_page_and_a_recomputed_csv_column_are_expected_and_nothing_else(
    li, tmp_path: Path
) -> None:
    head_csv = b'"track","mean","noise_group"\n"t","70.0","1"\n'
    a = _site(tmp_path / "a", {}, {"csv/tracks.csv": head_csv, "csv/margins.csv": head_csv})
    b = _site(
        tmp_path / "b",
        {"compare.html": "<table>1</table>", "other.html": "<table>1</table>"},
        {
            "csv/tracks.csv": b'"track","mean","noise_group"\n"t","70.0","2"\n',
            "csv/margins.csv": b'"track","mean","noise_group"\n"t","70.0","2"\n',
        },
    )
    failures, expected = li.compare_sites(a, b)
    assert sorted(e.split(":")[0] for e in expected) == ["compare.html", "csv/tracks.csv"]
    # a page nobody announced, and the group column of a CSV the change does not name, still fail
    assert failures == ["page only in head: other.html", "CSV differs: csv/margins.csv"]
    c = _site(
        tmp_path / "c", {}, {"csv/tracks.csv": b'"track","mean","noise_group"\n"t","71.0","2"\n'}
    )
    failures, _ = li.compare_sites(a, c)
    assert failures == ["CSV only in base: csv/margins.csv", "CSV differs: csv/tracks.csv"]


def test_issue_48_a_recomputed_group_is_masked_but_a_moved_rank_is_not(li, tmp_path: Path) -> None:
    row = (
        '<table class="sortable sticky" id="track-table"><tr>'
        '<td class="num" data-sort="3"><a href="../cells/c.html" title="seed 2">s2</a></td>\n'
        '<td class="num" data-sort="{rank}"><a class="quiet" href="e.html">{rank}</a></td>\n'
        '<td class="num" data-sort="{group}"><a class="quiet" href="e.html">{group}</a>{test}</td>'
        "\n</tr></table>"
    )
    base = row.format(rank=2, group=1, test="")
    paired = row.format(rank=2, group=2, test='<br><span class="std">paired</span>')
    moved = row.format(rank=3, group=2, test="")
    a = _site(tmp_path / "a", {"tracks/t.html": base}, {})
    failures, expected = li.compare_sites(a, _site(tmp_path / "b", {"tracks/t.html": paired}, {}))
    assert not failures and len(expected) == 1
    failures, _ = li.compare_sites(a, _site(tmp_path / "c", {"tracks/t.html": moved}, {}))
    assert len(failures) == 1


def _failed(root: Path, cells: dict[str, str]) -> Path:
    import json

    for cell, reason in cells.items():
        (root / "m" / cell).mkdir(parents=True, exist_ok=True)
        (root / "m" / cell / "error.json").write_text(
            json.dumps({"cell_id": cell, "reason": reason, "traceback": "..."})
        )
    return root


def test_a_cell_failing_in_both_trees_alike_is_a_note_and_any_other_failure_differs(
    li, tmp_path: Path
) -> None:
    """A missing optional part (Detectron2) fails the same cell in both trees: noted, not a
    difference; a cell failing in one tree only, or for another reason, is one."""
    why = "DetectronUnavailable: coco_detection needs Detectron2"
    base = _failed(tmp_path / "a", {"c1": why, "c2": "boom"})
    head = _failed(tmp_path / "b", {"c1": why, "c2": "bang", "c3": "new"})
    failures, notes = li.compare_failures(base, head)
    assert notes == [f"cell c1 failed in both trees: {why}"]
    assert failures == [
        "cell c3 failed in head only: new",
        "cell c2 failed for another reason: base 'boom', head 'bang'",
    ]


def test_issue_58_a_method_file_changed_since_the_records_is_expected_and_a_number_is_not(
    li,
) -> None:
    """The method page's 'code that ran' row says how much the method's file changed since the
    records' commit, and its summary is the file's docstring: both follow an edit of the file.
    The record count beside them, a number, does not."""
    row = (
        '<table class="kv"><tr><th>code that ran</th><td class="ran"><a href="x">f</a> '
        '<span class="muted">(6 records made at this commit)</span>:{}</td></tr>'
        "<tr><th>records</th><td>{}</td></tr></table>"
    )
    base = [
        row.format('\n<span class="unchanged">the same file at the build\'s commit</span>', 6),
        '<table class="kv readme"><tr><td>The hooks are the family\'s.</td></tr></table>',
    ]
    head = [
        row.format(
            '\n<strong class="changed-since">changed since</strong>: 27 lines added, 1 deleted '
            'by the build\'s commit <code>C</code> (<a href="d">the diff</a>): the code\n',
            6,
        ),
        '<table class="kv readme"><tr><td>The client step is this file\'s.</td></tr></table>',
    ]
    assert "issue 58" in (li.explain("methods/fedu.html", base, head) or "")
    assert li.explain("methods/fedu.html", base, [head[0].replace(">6<", ">7<"), head[1]]) is None
    assert li.explain("methods/orchestra.html", base, head) is None
