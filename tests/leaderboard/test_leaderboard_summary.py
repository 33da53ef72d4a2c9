"""Summary tables, reference points, short labels, paper pairs, plots, Markdown and CSV safety
(leaderboard/summary.py, labels.py, plots.py, mdtext.py, exports.csv_safe). Golden numbers come from
tests/leaderboard/lb_factory.py."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from leaderboard.build import build_model
from leaderboard.exports import csv_safe
from leaderboard.formatting import fmt_bytes
from leaderboard.labels import disambiguate, partition_short, round_stat, variant_labels
from leaderboard.loading import records_frame
from leaderboard.mdtext import inline
from leaderboard.plots import Point, alpha_plot, comm_plot, nice_ticks
from leaderboard.site_config import (
    SiteConfig,
    Track,
    TrackError,
    load_site_config,
    parse_site_config,
)
from leaderboard.summary import best_marks, paper_pairs
from leaderboard.tables import build_track
from tests.leaderboard.lb_factory import (
    KNN_CARD,
    make_record,
    showcase_records,
    standard_records,
    write_records,
)

TRACK = Track(
    id="c10-knn",
    title="c10 knn",
    dataset="cifar10",
    task="knn",
    card="knn@v1",
    label="kNN",
    federation={"num_clients": 100, "participation": 0.1},
    min_seeds=3,
)
LIN = Track(
    id="c10-lin",
    title="c10 linear",
    dataset="cifar10",
    task="linear_probe",
    card="linear@v1",
    label="linear",
    federation={"num_clients": 100, "participation": 0.1},
    min_seeds=3,
)
REFS = SiteConfig(
    reference_points={"no_pretrain": "random init", "central_ssl": "central", "local_ssl": "local"}
)
ALPHA01 = "niid_bench_labeldir(alpha=0.1,min_size=10)"


def _frame(records, refs=()):
    return records_frame([(Path(f"{r.cell_id}.json"), r) for r in records], refs)


# ----------------------------------------------------------------------------------------------------
# labels


def test_partition_short_labels() -> None:
    assert partition_short("iid", {"modifiers": []}) == "IID"
    assert (
        partition_short("niid_bench_labeldir", {"alpha": 0.1, "min_size": 10, "max_tries": 1000})
        == "Dir(0.1)"
    )
    assert partition_short("orchestra_sinkhorn", {"alpha": 1.0}) == "Dir(1)"
    assert partition_short("fedavg_shards", {"shards_per_client": 2}) == "Shards(2)"
    assert partition_short("quantity_dirichlet", {"beta": 0.5}) == "Qty(0.5)"
    assert partition_short("decssl_feature_cluster", {}) == "decssl_feature_cluster"
    sub = partition_short(
        "niid_bench_labeldir", {"alpha": 0.1, "modifiers": [{"name": "subsample", "fraction": 0.5}]}
    )
    assert sub == "Dir(0.1) + subsample(fraction=0.5)"


def test_short_labels_never_collide_within_a_dataset() -> None:
    shorts = {
        "niid_bench_labeldir(alpha=0.1)": "Dir(0.1)",
        "flesd_minshare(alpha=0.1)": "Dir(0.1)",
        "iid()": "IID",
    }
    names = {
        "niid_bench_labeldir(alpha=0.1)": "niid_bench_labeldir",
        "flesd_minshare(alpha=0.1)": "flesd_minshare",
    }
    out = disambiguate(shorts, names)
    assert out["iid()"] == "IID" and len(set(out.values())) == 3
    assert out["flesd_minshare(alpha=0.1)"] == "Dir(0.1) [flesd_minshare]"
    same_name = disambiguate({"a(x=1)": "A", "a(x=2)": "A"}, {"a(x=1)": "a", "a(x=2)": "a"})
    assert len(set(same_name.values())) == 2


def test_variant_labels_name_what_differs_readably() -> None:
    micro = {"backbone": {"name": "resnet_micro", "params": {"width": 8}}, "method": {"params": {}}}
    vit = {
        "backbone": {"name": "vit_micro", "params": {"embed_dim": 32, "depth": 5}},
        "method": {"params": {}},
    }
    assert variant_labels({"a": micro, "b": vit}) == {"a": "resnet_micro", "b": "vit_micro"}
    lr1 = {"backbone": {"name": "r"}, "method": {"params": {"lr": 0.1, "tau": 0.5}}}
    lr2 = {"backbone": {"name": "r"}, "method": {"params": {"lr": 0.32, "tau": 0.5}}}
    assert variant_labels({"a": lr1, "b": lr2}) == {"a": "lr=0.1", "b": "lr=0.32"}
    assert variant_labels({"a": lr1}) == {"a": ""}
    rounds = [{"fl": {"rounds": r}, "backbone": {"name": "r"}} for r in (5, 50)]
    assert variant_labels(dict(zip("ab", rounds))) == {"a": "R=5", "b": "R=50"}


def test_round_stat() -> None:
    assert round_stat(0.19955662865954937) == 0.2
    assert round_stat(3.2757218575619476) == 3.28
    assert round_stat(10) == 10 and round_stat(True) is True
    assert round_stat([144, 143]) == "144, 143"
    assert round_stat(list(range(100))) == "100 values: min 0, mean 49.5, max 99"


# ----------------------------------------------------------------------------------------------------
# reference points


def test_reference_points_are_never_ranked_even_when_they_score_highest() -> None:
    records = standard_records() + [
        make_record("no_pretrain", seed=s, value=99.0, method_params={}) for s in range(3)
    ]
    table = build_track(_frame(records, REFS.reference_points), TRACK).table
    iid = table[table["partition_label"] == "iid"].set_index("method")
    assert iid.loc["no_pretrain", "status"] == "complete" and iid.loc["no_pretrain", "rank"] is None
    assert iid.loc["no_pretrain", "noise_group"] is None
    assert iid.loc["orchestra", "rank"] == 1  # 75.5 < 99 but the best *method*
    # without the reference-point list, random init would take rank 1
    plain = build_track(_frame(records), TRACK).table
    assert (
        plain[(plain["method"] == "no_pretrain") & (plain["partition_label"] == "iid")][
            "rank"
        ].item()
        == 1
    )


def test_site_config_lists_reference_points_as_data() -> None:
    config = load_site_config()
    assert {"no_pretrain", "central_ssl", "local_ssl", "dec_sl"} <= set(config.reference_points)
    with pytest.raises(TrackError, match="unknown keys"):
        parse_site_config({"site": {"repo": "x"}})
    assert parse_site_config({"tracks": []}) == SiteConfig()


# ----------------------------------------------------------------------------------------------------
# summary


def _summary(tmp_path: Path):
    write_records(tmp_path / "res", showcase_records())
    model = build_model(
        [tmp_path / "res"], tracks=[TRACK, LIN], references_dir=tmp_path / "none", config=REFS
    )
    assert len(model.summaries) == 1
    return model.summaries[0]


def test_summary_has_one_row_per_method_and_one_column_per_track_and_partition(
    tmp_path: Path,
) -> None:
    st = _summary(tmp_path)
    assert st.dataset == "cifar10"
    cols = [(c.track_label, c.partition_short) for c in st.columns]
    assert cols == [
        ("kNN", "IID"),
        ("kNN", "Dir(1)"),
        ("kNN", "Dir(0.1)"),
        ("linear", "IID"),
        ("linear", "Dir(0.1)"),
    ]
    ranked = [(r.method, r.variant) for r in st.rows if not r.reference]
    refs = [(r.method, r.variant) for r in st.rows if r.reference]
    # by mean rank: 1.0, 2.0, 2.5
    assert ranked == [("orchestra", ""), ("fedavg_simclr", ""), ("fedu", "")]
    # reference points after the ranking, in tracks.yaml order; no_pretrain's two rows named by
    # their backbone
    assert refs == [
        ("no_pretrain", "resnet18_cifar"),
        ("no_pretrain", "vit_tiny"),
        ("central_ssl", ""),
        ("local_ssl", ""),
    ]
    by = {(r.method, r.variant): r for r in st.rows}
    orchestra = by[("orchestra", "")]
    assert [None if c is None else c["mean"] for c in orchestra.cells][:4] == [
        75.5,
        74.5,
        73.0,
        66.5,
    ]
    assert orchestra.cells[4]["status"] == "missing"  # orchestra has a linear score under IID only
    assert by[("fedu", "")].cells[3] is None  # fedu was never scored with the linear probe
    assert by[("fedu", "")].cells[2]["status"] == "incomplete" and by[("fedu", "")].cells[2][
        "values"
    ] == [61.0, 62.0]
    assert orchestra.rounds == 100 and orchestra.local_epochs == 5


def test_best_and_within_noise_marks(tmp_path: Path) -> None:
    st = _summary(tmp_path)
    by = {(r.method, r.variant): r for r in st.rows}
    marks = {
        m: best_marks(by[(m, "")].cells[0], st.columns[0])
        for m in ("orchestra", "fedavg_simclr", "fedu")
    }
    assert marks == {
        "orchestra": (True, True),
        "fedavg_simclr": (False, False),
        "fedu": (False, False),
    }
    ref = by[("no_pretrain", "resnet18_cifar")]
    # 80.0 beats fedu, but is never "best"
    assert best_marks(ref.cells[0], st.columns[0]) == (False, False)
    # a column with a single ranked cell has no "best"
    single = next(
        i
        for i, c in enumerate(st.columns)
        if c.track_label == "linear" and c.partition_short == "Dir(0.1)"
    )
    assert st.columns[single].n_ranked == 1
    assert best_marks(by[("fedavg_simclr", "")].cells[single], st.columns[single]) == (False, False)


# ----------------------------------------------------------------------------------------------------
# paper


def _reference_file(folder: Path, card_id: str | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cid = f", card_id: {card_id}" if card_id else ""
    path = folder / "paper_t1.yaml"
    path.write_text(f"""
source: "Some paper (2024)"
table: "Table 1"
metric: top1
unit: percent
selection: final
settings: {{dataset: cifar10}}
columns:
  - {{label: "alpha 0.1", card: knn@v1{cid}, settings: {{alpha: 0.1}}}}
  - {{label: "IID", card: knn@v1{cid}, settings: {{iid: true}}}}
  - {{label: "their kNN", card: knn/theirs, settings: {{alpha: 0.1}}}}
rows:
  - {{label: "Orchestra", method: orchestra, values: [70.0, 77.5, 60.0]}}
  - {{label: "FedU", method: fedu, values: [50.0, null, null]}}
  - {{label: "f-SimSiam", method: null, values: [40.0, 41.0, 42.0]}}
""")
    return folder


def test_ours_beside_the_papers_with_delta_and_interval(tmp_path: Path) -> None:
    write_records(tmp_path / "res", standard_records())
    refs = _reference_file(tmp_path / "ref", KNN_CARD.card_id)
    model = build_model([tmp_path / "res"], tracks=[TRACK], references_dir=refs, config=REFS)
    pairs = {(p["ref"].method, p["ref"].column): p for p in model.pairs[TRACK.id]}
    # only methods we implement, only on the track's card (not knn/theirs)
    assert set(pairs) == {("orchestra", "alpha 0.1"), ("orchestra", "IID"), ("fedu", "alpha 0.1")}
    p = pairs[("orchestra", "alpha 0.1")]
    ours = p["ours"]
    assert ours["mean"] == 73.0 and p["delta"] == pytest.approx(3.0)
    assert p["delta_low"] == pytest.approx(ours["ci_low"] - 70.0) and p[
        "delta_high"
    ] == pytest.approx(ours["ci_high"] - 70.0)
    assert pairs[("orchestra", "IID")]["delta"] == pytest.approx(75.5 - 77.5)
    fedu = pairs[("fedu", "alpha 0.1")]
    assert fedu["delta"] is None and "2 of 3 seeds" in fedu["why"]  # incomplete: no delta


def test_no_delta_when_the_papers_card_id_is_not_ours(tmp_path: Path) -> None:
    write_records(tmp_path / "res", standard_records())
    refs = _reference_file(tmp_path / "ref", None)
    model = build_model([tmp_path / "res"], tracks=[TRACK], references_dir=refs, config=REFS)
    pairs = model.pairs[TRACK.id]
    assert pairs and all(
        p["delta"] is None and "card id" in p["why"] for p in pairs if p["ours"] is not None
    )
    empty = build_model([], tracks=[TRACK], references_dir=refs, config=REFS)
    assert [p["why"] for p in empty.pairs[TRACK.id]] == [
        "no record of ours on this setting yet"
    ] * 3


def test_paper_pairs_ignore_test_selected_numbers(tmp_path: Path) -> None:
    write_records(tmp_path / "res", standard_records())
    refs = _reference_file(tmp_path / "ref", KNN_CARD.card_id)
    (refs / "paper_t1.yaml").write_text(
        (refs / "paper_t1.yaml")
        .read_text()
        .replace("selection: final", "selection: best_epoch_test")
    )
    model = build_model([tmp_path / "res"], tracks=[TRACK], references_dir=refs, config=REFS)
    assert paper_pairs(model.tracks[0]) == []


# ----------------------------------------------------------------------------------------------------
# plots


def test_nice_ticks_cover_the_range() -> None:
    assert nice_ticks(41.0, 89.0) == [40.0, 50.0, 60.0, 70.0, 80.0, 90.0]
    ticks = nice_ticks(0.12, 0.13)
    assert ticks[0] <= 0.12 and ticks[-1] >= 0.13 and len(ticks) <= 8


def _pts(xs_ys):
    return [Point(series=s, x=x, y=y, title=f"{s} {y}") for s, x, y in xs_ys]


def test_comm_plot_is_log_scaled_with_a_none_column() -> None:
    plot = comm_plot(
        _pts([("a", 1e5, 60.0), ("b", 1e7, 70.0), ("c", 0.0, 50.0), ("a", 1e6, 65.0)]),
        "top1",
        fmt_bytes,
    )
    cx = {m["title"]: m["cx"] for s in plot.series for m in s["marks"]}
    left = plot.box[0]
    assert cx["c 50.0"] < plot.breaks[0] < cx["a 60.0"] < cx["a 65.0"] < cx["b 70.0"]
    # log scale: 10x more bytes is the same distance
    assert cx["a 65.0"] - cx["a 60.0"] == pytest.approx(cx["b 70.0"] - cx["a 65.0"], abs=0.2)
    assert [t["label"] for t in plot.xticks] == ["none", "100 kB", "1 MB", "10 MB"]
    assert all(left <= x <= plot.box[2] for x in cx.values())
    # higher scores are drawn higher (smaller y)
    ys = {m["title"]: m["cy"] for s in plot.series for m in s["marks"]}
    assert ys["b 70.0"] < ys["a 60.0"] < ys["c 50.0"]


def test_alpha_plot_puts_iid_at_the_right_and_joins_complete_points() -> None:
    pts = _pts([("a", 0.1, 60.0), ("a", 1.0, 65.0), ("a", math.inf, 70.0), ("b", 0.1, 50.0)])
    pts[3].hollow = True
    plot = alpha_plot(pts, "top1")
    assert [t["label"] for t in plot.xticks] == ["0.1", "1", "IID"]
    xs = [t["x"] for t in plot.xticks]
    assert xs == sorted(xs)
    a, b = plot.series
    assert a["path"].count("L") == 2 and b["path"] == ""  # one hollow point: no line
    assert b["marks"][0]["hollow"]
    assert alpha_plot([], "top1") is None and comm_plot([], "top1", fmt_bytes) is None


# ----------------------------------------------------------------------------------------------------
# markdown, csv


def test_markdown_is_rendered_and_raw_html_escaped() -> None:
    html = str(inline("**bold** `code` <script>alert(1)</script> <img src=x onerror=alert(2)>"))
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert "<script" not in html and "<img" not in html and "&lt;script&gt;" in html
    assert "href" not in str(inline("[x](javascript:alert(1))"))
    # a link relative to methods/README.md: into the repository when its URL is known, plain text
    # otherwise
    assert 'href="https://h.example/o/r/blob/abc/methods/fedu.py"' in str(
        inline("[f](fedu.py)", blob_base="https://h.example/o/r/blob/abc", source_dir="methods")
    )
    assert "href" not in str(inline("[f](fedu.py)"))


def test_csv_cells_cannot_run_as_formulas() -> None:
    frame = pd.DataFrame(
        {
            "method": ['=HYPERLINK("http://x")', "+1", "-cmd", "@SUM(A1)", "fedu"],
            "value": [-1.5, 2.0, 3.0, 4.0, 5.0],
            "seeds": [[0, 1], [0], [], [2], [1]],
        }
    )
    safe = csv_safe(frame)
    assert safe["method"].tolist() == [
        '\'=HYPERLINK("http://x")',
        "'+1",
        "'-cmd",
        "'@SUM(A1)",
        "fedu",
    ]
    assert safe["value"].tolist() == [-1.5, 2.0, 3.0, 4.0, 5.0]  # numbers untouched
    assert safe["seeds"].tolist()[0] == "[0, 1]"
