"""Paired margins over a baseline (leaderboard/margins.py): per seed, against the same seed and
setting."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from benchmark.records.identity import cell_id_of
from leaderboard import stats
from leaderboard.__main__ import main
from leaderboard.loading import records_frame
from leaderboard.margins import markdown, paired_margins
from tests.leaderboard.lb_factory import DECSSL_PROBE_CARD, make_record, write_records

# random init per seed: the seed moves it more than the gaps below
BASE = {0: 70.0, 1: 75.0, 2: 72.0}
RUN = {0: 80.0, 1: 76.0, 2: 79.0}


def _frame(records):
    return records_frame([(Path(f"r{i}.json"), r) for i, r in enumerate(records)])


def _with_backbone(record, params):
    cell = {**record.cell, "backbone": {**record.cell["backbone"], "params": params}}
    # a consistent record: verified on load
    return dataclasses.replace(record, cell=cell, cell_id=cell_id_of(cell))


def test_margin_is_the_mean_of_per_seed_differences_with_its_t_interval() -> None:
    recs = [make_record("no_pretrain", seed=s, value=v) for s, v in BASE.items()]
    recs += [make_record("fedavg_simclr", seed=s, value=v) for s, v in RUN.items()]
    table = paired_margins(_frame(recs), task="knn")
    assert len(table) == 1
    row = table.iloc[0]
    per_seed = {s: RUN[s] - BASE[s] for s in BASE}
    assert row["per_seed"] == per_seed and row["n"] == 3 and row["positive"] == 3
    ref = stats.summarize(list(per_seed.values()))
    assert row["margin"] == pytest.approx(ref.mean) and row["ci_low"] == pytest.approx(ref.ci_low)
    assert row["mean"] == pytest.approx(sum(RUN.values()) / 3) and row[
        "margin_std"
    ] == pytest.approx(ref.std)


def test_only_the_same_seed_backbone_and_card_pair() -> None:
    recs = [
        make_record("no_pretrain", seed=0, value=70.0),
        # another backbone
        _with_backbone(make_record("no_pretrain", seed=1, value=10.0), {"width": 8}),
        # selects on test
        make_record("no_pretrain", seed=2, value=50.0, card=DECSSL_PROBE_CARD, task="knn"),
    ]
    recs += [make_record("fedavg_simclr", seed=s, value=80.0) for s in (0, 1, 2)]
    row = paired_margins(_frame(recs), task="knn").iloc[0]
    assert row["per_seed"] == {0: 10.0} and row["n"] == 1 and math.isnan(row["ci_low"])


def test_a_baseline_under_another_partition_is_used_and_said() -> None:
    """no_pretrain does not train, so its score is the same under every partition; a grid may run it
    once."""
    recs = [
        make_record("no_pretrain", seed=0, value=70.0),
        make_record("fedavg_simclr", seed=0, value=75.0, alpha=0.1),
        make_record("fedavg_simclr", seed=0, value=78.0),
    ]
    table = paired_margins(_frame(recs), task="knn")
    by_part = {r["partition"]: r for _, r in table.iterrows()}
    assert by_part["iid"]["per_seed"] == {0: 8.0} and by_part["iid"]["baseline_partition"] == "same"
    dirichlet = by_part["niid_bench_labeldir α=0.1"]
    assert dirichlet["per_seed"] == {0: 5.0} and dirichlet["baseline_partition"] == "other"
    assert "baseline from another partition" in markdown(table, task="knn", baseline="no_pretrain")


def test_cli_prints_the_table_and_fails_without_partners(tmp_path: Path, capsys) -> None:
    write_records(
        tmp_path / "a",
        [make_record("no_pretrain", seed=s, value=v) for s, v in BASE.items()]
        + [make_record("orchestra", seed=s, value=v) for s, v in RUN.items()],
    )
    assert main(["margins", "--results", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "| orchestra | resnet18_cifar | iid | 3 |" in out and "+10.0, +1.0, +7.0" in out
    write_records(tmp_path / "b", [make_record("orchestra", seed=0, value=80.0)])
    assert main(["margins", "--results", str(tmp_path / "b")]) == 1


def test_a_track_with_a_baseline_shows_the_paired_margins(tmp_path: Path) -> None:
    from leaderboard.build import build_model
    from leaderboard.pages import render_site
    from leaderboard.site_config import Track

    recs = [make_record("no_pretrain", seed=s, value=v) for s, v in BASE.items()]
    recs += [make_record("fedavg_simclr", seed=s, value=v) for s, v in RUN.items()]
    write_records(tmp_path / "res", recs)
    kw = {
        "id": "t",
        "title": "T",
        "dataset": "cifar10",
        "task": "knn",
        "card": "knn@v1",
        "federation": {"num_clients": 100, "participation": 0.1},
    }
    model = build_model(
        [tmp_path / "res"], tracks=[Track(**kw, baseline="no_pretrain"), Track(**{**kw, "id": "u"})]
    )
    with_base, without = model.tracks
    assert without.margins is None
    assert list(with_base.margins["method"]) == ["fedavg_simclr"]
    assert with_base.margins.iloc[0]["per_seed"] == {s: RUN[s] - BASE[s] for s in BASE}
    render_site(model, tmp_path / "site")
    page = (tmp_path / "site" / "tracks").glob("*.html")
    pages = {p.name: p.read_text(encoding="utf-8") for p in page}
    shown = [text for text in pages.values() if 'id="margin-table"' in text]
    assert len(shown) == 1 and "s0: +10.0, s1: +1.0, s2: +7.0" in shown[0]


def _on_validation(record):
    cell = {
        **record.cell,
        "dataset": {**record.cell["dataset"], "params": {"eval_split": "validation"}},
    }
    return dataclasses.replace(record, cell=cell, cell_id=cell_id_of(cell))


def _sweep(lr_values: dict[float, dict[float | None, float]], *, validation: bool = True):
    """no_pretrain at 70 on seed 0 (both partitions), and fedu at each lr with the given value per
    partition."""
    recs = [make_record("no_pretrain", seed=0, value=70.0, alpha=a) for a in (None, 0.1)]
    for lr, by_alpha in lr_values.items():
        recs += [
            make_record("fedu", seed=0, value=v, alpha=a, method_params={"lr": lr, "tau": 0.5})
            for a, v in by_alpha.items()
        ]
    return [_on_validation(r) for r in recs] if validation else recs


def test_configurations_of_one_method_are_rows_named_by_what_differs() -> None:
    table = paired_margins(
        _frame(_sweep({0.032: {None: 72.0, 0.1: 71.0}, 0.32: {None: 80.0, 0.1: 75.0}})), task="knn"
    )
    assert sorted(set(table["variant"])) == ["lr=0.032", "lr=0.32"]
    assert set(table["eval_split"]) == {"validation"}
    text = markdown(table, task="knn", baseline="no_pretrain")
    assert (
        "Scored on the validation split" in text
        and "| fedu (lr=0.32) | resnet18_cifar | iid | 1 |" in text
    )
    single = paired_margins(
        _frame([make_record("no_pretrain"), make_record("fedu", value=75.0)]), task="knn"
    )
    assert list(single["variant"]) == [""]


def test_validation_and_test_scores_never_pair() -> None:
    recs = [make_record("no_pretrain", seed=0, value=70.0)] + [
        _on_validation(make_record("fedu", value=80.0))
    ]
    assert paired_margins(_frame(recs), task="knn").empty


def test_select_best_averages_partitions_and_skips_incomplete_variants() -> None:
    from leaderboard.margins import select_best

    # lr=3.2 is best on IID but has no Dirichlet cell: it cannot win by leaving the hard partition
    # out
    table = paired_margins(
        _frame(
            _sweep(
                {
                    0.032: {None: 72.0, 0.1: 71.0},
                    0.32: {None: 80.0, 0.1: 69.0},
                    0.0032: {None: 75.0, 0.1: 76.0},
                    3.2: {None: 99.0},
                }
            )
        ),
        task="knn",
    )
    sel = select_best(table).set_index("variant")
    assert sel.loc["lr=0.32", "average"] == pytest.approx((10.0 - 1.0) / 2)
    assert sel.loc["lr=0.0032", "average"] == pytest.approx(5.5)
    assert math.isnan(sel.loc["lr=3.2", "average"])
    assert list(sel.index[sel["chosen"]]) == ["lr=0.0032"] and sel["chosen"].sum() == 1


def test_select_refuses_test_split_records(tmp_path: Path, capsys) -> None:
    from leaderboard.margins import select_best

    test_table = paired_margins(
        _frame(_sweep({0.032: {None: 72.0}, 0.32: {None: 80.0}}, validation=False)), task="knn"
    )
    with pytest.raises(ValueError, match="validation"):
        select_best(test_table)
    write_records(
        tmp_path / "t", _sweep({0.032: {None: 72.0}, 0.32: {None: 80.0}}, validation=False)
    )
    assert main(["margins", "--results", str(tmp_path / "t"), "--select"]) == 2
    write_records(
        tmp_path / "v", _sweep({0.032: {None: 72.0, 0.1: 71.0}, 0.32: {None: 80.0, 0.1: 75.0}})
    )
    assert main(["margins", "--results", str(tmp_path / "v"), "--select"]) == 0
    out = capsys.readouterr().out
    assert (
        "| fedu | resnet18_cifar | lr=0.32 | iid: +10.0, niid_bench_labeldir α=0.1: +5.0 | +7.5 | **yes** |"
        in out
    )


def test_tracks_leave_validation_runs_out() -> None:
    from leaderboard.site_config import Track
    from leaderboard.tables import select_track

    frame = _frame(
        [make_record("fedu", value=80.0), _on_validation(make_record("fedu", value=90.0, seed=1))]
    )
    track = Track(id="t", title="T", dataset="cifar10", task="knn", card="knn@v1")
    assert list(select_track(frame, track)["value"]) == [80.0]
