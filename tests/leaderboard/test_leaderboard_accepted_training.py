"""What the site shows of an accepted cell's training beyond its scores: traffic a method does not
declare is badged "traffic not derived" and not ranked on communication (issue 52, item 2), and a
plugin's non-code files are listed with their sizes on its method page, those above the documented
size marked for a reviewer (issue 60, item 3). Acceptances are written as ``accept`` writes them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from benchmark.records.acceptance_files import (
    PLUGIN_FILE_REVIEW_BYTES,
    acceptance_path,
    acceptance_text,
    compare_scores,
    make_acceptance,
)
from benchmark.records.integrity import seal
from leaderboard.site import build_site
from tests.leaderboard.lb_factory import make_record, write_records

TRACK = "cifar10-knn"
BIG = PLUGIN_FILE_REVIEW_BYTES + 1
FILES = {"fssl_foo": [["fssl_foo/labels.bin", BIG], ["fssl_foo/README.txt", 120]]}


def _accept(results: Path, record: Any, **fields: Any) -> None:
    acc = make_acceptance(
        record,
        compare_scores(record.scores, record.scores),
        checkpoint={"sha256": "0" * 64, "bytes": 1},
        git_sha="abc",
        git_dirty=False,
        accepted_at="2026-12-07T16:00:00+00:00",
        bundle_sha256=None,
        **fields,
    )
    path = acceptance_path(results, record.cell_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(acceptance_text(acc))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four methods, one seed each, accepted four ways: traffic derived (fedavg_simclr), traffic
    not derived with plugin files listed (orchestra, standing in for a plugin), not derived but
    re-trained by accept (fedema: the re-run's traffic is the maintainers' own), and a plugin
    re-trained by accept (fedu: its re-run's counter ran beside its code, so still not derived)."""
    root = tmp_path_factory.mktemp("accepted")
    results = root / "results"
    records = {
        "fedavg_simclr": make_record("fedavg_simclr", value=70.0, bytes_up=4_000_000),
        "orchestra": make_record("orchestra", value=71.0, bytes_up=10),
        "fedema": make_record("fedema", value=69.0, bytes_up=5_000_000),
        "fedu": make_record("fedu", value=68.0, bytes_up=1),
    }
    write_records(results, records.values())
    _accept(results, seal(records["fedavg_simclr"]), traffic={"derived": True})
    _accept(
        results,
        seal(records["orchestra"]),
        traffic={"derived": False, "why": "its method declares no traffic"},
        training={"box": "bubblewrap", "plugin_files": FILES},
    )
    retrained = {"bytes_up": 5, "bytes_down": 5, "pretrain_time_s": 1.0, "eval_time_s": 1.0}
    _accept(
        results,
        seal(records["fedema"]),
        traffic={"derived": False, "why": "its method declares no traffic"},
        training={"box": "bubblewrap", "retrained": retrained},
    )
    # a plugin re-trained in the box: its code ran beside the counter, so the re-run's bytes are
    # still its own word (the acceptance says ``plugin``)
    _accept(
        results,
        seal(records["fedu"]),
        traffic={"derived": False, "why": "its method is a plugin", "plugin": True},
        training={"box": "bubblewrap", "retrained": retrained},
    )
    out = root / "site"
    build_site([results], out)
    return out


def _row(page: str, method: str) -> str:
    rows = re.findall(r"<tr class=\"[^\"]*\"[^>]*>.*?</tr>", page, flags=re.DOTALL)
    (row,) = [r for r in rows if f">{method}</a>" in r]
    return row


def test_traffic_not_derived_is_badged_and_not_ranked_on_communication(site: Path) -> None:
    page = (site / "tracks" / f"{TRACK}.html").read_text()
    plugin, derived, retrained, boxed = (
        _row(page, m) for m in ("orchestra", "fedavg_simclr", "fedema", "fedu")
    )
    assert "traffic not derived" in plugin and 'title="accept could not derive' in plugin
    assert "traffic not derived" not in derived and "traffic not derived" not in retrained
    assert "traffic not derived" in boxed
    bytes_sort = {}  # the sort key of each row's bytes-per-client cell
    for m in ("orchestra", "fedavg_simclr"):
        cells = re.findall(
            r'<td class="num" data-sort="([^"]*)">(.*?)</td>', _row(page, m), re.DOTALL
        )
        (bytes_sort[m],) = [key for key, body in cells if re.search(r"\d (B|kB|MB|GB)<", body)]
    assert bytes_sort["orchestra"] == "" and float(bytes_sort["fedavg_simclr"]) > 0
    assert "traffic not derived</span></dt>" in (site / "legend.html").read_text()
    data = json.loads((site / "data.json").read_text())
    flags = {r["method"]: r["traffic_underived"] for t in data["tracks"] for r in t["rows"]}
    assert flags == {"orchestra": True, "fedavg_simclr": False, "fedema": False, "fedu": True}


def test_the_entry_page_says_a_seed_s_traffic_was_not_derived(site: Path) -> None:
    pages = [p.read_text() for p in (site / "entries").glob("*.html")]
    underived = [t for t in pages if "traffic not derived)</td>" in t]
    assert len(underived) == 2 and {">orchestra</a>" in t for t in underived} == {True, False}
    assert any(">fedu</a>" in t for t in underived)


def test_the_cell_page_says_whether_its_traffic_was_derived(site: Path) -> None:
    pages = {p.name: p.read_text() for p in (site / "cells").glob("*.html")}
    underived = [t for t in pages.values() if "traffic not derived</span>" in t]
    derived = [t for t in pages.values() if "equal to it, byte for byte" in t]
    assert len(underived) == 2 and sum("orchestra" in t for t in underived) == 1
    assert sum("fedu" in t for t in underived) == 1
    assert len(derived) == 1 and "fedavg_simclr" in derived[0]


def test_the_method_page_lists_a_plugin_s_non_code_files_and_marks_the_big_one(
    site: Path,
) -> None:
    page = (site / "methods" / "orchestra.html").read_text()
    section = page[page.index('id="plugin-files"') :]
    section = section[: section.index("</table>")]
    assert "<code>fssl_foo</code>" in section and "1 accepted cell" in section
    rows = re.findall(
        r"<tr( class=\"review\")?><td><code>([^<]+)</code></td><td>([^<]+)</td>", section
    )
    assert rows == [
        (' class="review"', "fssl_foo/labels.bin", f"65.5 kB ({BIG:,} B)"),
        ("", "fssl_foo/README.txt", "120 B"),
    ]
    assert section.count(">review</span>") == 1
    assert f"{PLUGIN_FILE_REVIEW_BYTES:,} bytes" in section
    # a method with no listing has no such section
    assert 'id="plugin-files"' not in (site / "methods" / "fedavg_simclr.html").read_text()
