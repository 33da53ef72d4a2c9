"""The compare page's numbers (leaderboard/compare.py): every pair's difference is the one test the
index and the track pages use, signed A − B whichever way the pair is picked."""

from __future__ import annotations

import math
from pathlib import Path

from leaderboard import stats
from leaderboard.build import build_model
from leaderboard.compare import compare_data, default_pair, pair_rows
from leaderboard.headline import dataset_headlines
from leaderboard.site import build_site
from tests.leaderboard.lb_factory import make_record, write_records

# seeds 0-2 of two methods and a reference point on one IID pool; fedu only on seeds 3-5
VALUES = {
    "fedavg_simclr": ([80.0, 90.0, 70.0], range(3)),
    "orchestra": ([78.5, 88.4, 68.6], range(3)),
    "no_pretrain": ([60.0, 61.0, 59.0], range(3)),
    "fedu": ([77.0, 78.0, 79.0], range(3, 6)),
}


def _model(root: Path):
    records = [
        make_record(m, seed=s, value=v)
        for m, (values, seeds) in VALUES.items()
        for v, s in zip(values, seeds)
    ]
    write_records(root, records)
    return build_model([root])


def test_every_difference_is_the_sites_one_test_and_flips_with_the_pair(tmp_path: Path) -> None:
    model = _model(tmp_path / "results")
    data = compare_data(model.tracks)
    labels = [c["label"] for c in data["configs"]]
    assert labels == ["fedavg_simclr", "fedu", "no_pretrain", "orchestra"]
    a, b = labels.index("fedavg_simclr"), labels.index("orchestra")
    want = stats.difference([80.0, 90.0, 70.0], [0, 1, 2], [78.5, 88.4, 68.6], [0, 1, 2])
    (row,) = pair_rows(data, a, b)
    assert row["test"] == "paired over 3 seeds" and row["verdict"] == "beyond noise"
    assert row["delta"] == f"+{want.delta:.2f}"
    assert row["ci"] == f"[+{want.ci_low:.2f}, +{want.ci_high:.2f}]"
    assert row["ahead"] == "fedavg_simclr"
    (back,) = pair_rows(data, b, a)
    assert back["delta"] == f"−{want.delta:.2f}" and back["ahead"] == "fedavg_simclr"
    assert back["ci"] == f"[−{want.ci_high:.2f}, −{want.ci_low:.2f}]"
    # other seeds: Welch's interval, named
    (welch,) = pair_rows(data, labels.index("fedu"), a)
    assert welch["test"] == "Welch" and welch["verdict"] == "within noise"
    # the index's first answer (leader, runner-up) is the pair shown first, with the same Δ
    h = dataset_headlines(model.tracks, [])[0]
    assert (h.leader["method"], h.runner_up["method"]) == ("fedavg_simclr", "orchestra")
    assert default_pair(data) == (a, b)
    assert math.isclose(h.delta.delta, want.delta) and h.delta.paired


def test_the_page_holds_its_data_inline_and_draws_the_first_pair_without_script(
    tmp_path: Path,
) -> None:
    _model(tmp_path / "results")
    build_site([tmp_path / "results"], tmp_path / "site")
    page = (tmp_path / "site" / "compare.html").read_text()
    assert 'id="compare-data" hidden data-json="' in page  # no fetch: works from file://
    assert "fetch(" not in (tmp_path / "site" / "static" / "compare.js").read_text()
    body = page.split('id="compare-body"', 1)[1].split("</tbody>", 1)[0]
    assert "paired over 3 seeds" in body and "beyond noise: fedavg_simclr ahead" in body
    index = (tmp_path / "site" / "index.html").read_text()
    method = (tmp_path / "site" / "methods" / "orchestra.html").read_text()
    assert 'href="compare.html"' in index and 'href="../compare.html#a=orchestra"' in method
