"""Table building from fixture records: golden table, incomplete/missing cells, card mixing, skipped
files, unverified records, references beside ours (leaderboard/build.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from benchmark.records.schema import TaskScores
from leaderboard.build import build_model
from leaderboard.loading import load_all, records_frame
from leaderboard.site import build_site
from leaderboard.site_config import Track, TrackError, load_tracks, parse_tracks
from leaderboard.tables import CardMixError, build_track, check_single_card
from tests.leaderboard.lb_factory import (
    DECSSL_PROBE_CARD,
    LINEAR_CARD,
    LINEAR_CARD_1EP,
    make_record,
    standard_records,
    write_raw,
    write_records,
)

TRACK = Track(
    id="c10-knn",
    title="c10 knn",
    dataset="cifar10",
    task="knn",
    card="knn@v1",
    federation={"num_clients": 100, "participation": 0.1},
    min_seeds=3,
)
# method, partition, status, n_seeds, mean, std, rank, noise group (golden: computed by hand from
# KNN_VALUES). The cells share seeds 0-2, so groups come from the paired test: fedavg_simclr is
# 0.5 below fedu on every IID seed (and fedu 2.0 below fedavg_simclr at α = 1), a per-seed gap
# with no spread, so each starts a group of its own (Welch's test would have joined them)
GOLDEN = [
    ("orchestra", "iid", "complete", 3, 75.5, 0.5, 1, 1),
    ("fedu", "iid", "complete", 3, 71.5, 1.0, 2, 2),
    ("fedavg_simclr", "iid", "complete", 3, 71.0, 1.0, 3, 3),
    ("orchestra", "niid_bench_labeldir(alpha=1.0,min_size=10)", "complete", 3, 74.5, 0.5, 1, 1),
    ("fedavg_simclr", "niid_bench_labeldir(alpha=1.0,min_size=10)", "complete", 3, 69.0, 1.0, 2, 2),
    ("fedu", "niid_bench_labeldir(alpha=1.0,min_size=10)", "complete", 3, 67.0, 1.0, 3, 3),
    ("orchestra", "niid_bench_labeldir(alpha=0.1,min_size=10)", "complete", 3, 73.0, 1.0, 1, 1),
    ("fedavg_simclr", "niid_bench_labeldir(alpha=0.1,min_size=10)", "complete", 3, 62.0, 2.0, 2, 2),
    ("fedu", "niid_bench_labeldir(alpha=0.1,min_size=10)", "incomplete", 2, None, None, None, None),
]


def _frame(records):
    return records_frame([(Path(f"{r.cell_id}.json"), r) for r in records])


def test_golden_table() -> None:
    tt = build_track(_frame(standard_records()), TRACK)
    got = [
        (
            r.method,
            r.partition_label,
            r.status,
            r.n_seeds,
            None if pd.isna(r.mean) else r.mean,
            None if pd.isna(r.std) else r.std,
            r.rank,
            r.noise_group,
        )
        for r in tt.table.itertuples()
    ]
    assert got == GOLDEN
    assert tt.card_name == "knn@v1" and tt.metric == "top1"
    assert tt.table["bytes"].tolist() == [8_000_000.0] * 9
    incomplete = tt.table[tt.table["status"] == "incomplete"].iloc[0]
    assert incomplete["values"] == [61.0, 62.0]  # shown, not averaged
    # no selected record silently vanishes
    assert tt.cell_ids == {r.cell_id for r in standard_records()}


def test_missing_and_diverged_cells_are_shown() -> None:
    records = standard_records() + [
        make_record("fedema", alpha=0.1, seed=s, value=50.0 + s) for s in range(3)
    ]
    records.append(make_record("fedema", alpha=1.0, seed=0, status="diverged"))
    table = build_track(_frame(records), TRACK).table
    fedema = table[table["method"] == "fedema"].set_index("partition_label")
    assert fedema.loc["iid", "status"] == "missing"
    assert fedema.loc["niid_bench_labeldir(alpha=1.0,min_size=10)", "status"] == "diverged"
    assert fedema.loc["niid_bench_labeldir(alpha=1.0,min_size=10)", "n_diverged"] == 1
    assert fedema.loc["niid_bench_labeldir(alpha=0.1,min_size=10)", "rank"] == 3


def test_track_selects_dataset_federation_and_card() -> None:
    other = [
        make_record("fedavg_simclr", seed=0, value=1.0, dataset="cifar100"),
        make_record("fedavg_simclr", seed=0, value=2.0, num_clients=10),
        make_record("fedavg_simclr", seed=0, value=3.0, card=LINEAR_CARD, task="linear_probe"),
    ]
    tt = build_track(_frame(standard_records() + other), TRACK)
    assert tt.cell_ids == {r.cell_id for r in standard_records()}


def test_mixing_card_ids_in_one_column_raises() -> None:
    track = Track(
        id="c10-lin",
        title="lin",
        dataset="cifar10",
        task="linear_probe",
        card="linear@v1",
        min_seeds=1,
    )
    records = [
        make_record("fedavg_simclr", seed=0, value=50.0, card=LINEAR_CARD, task="linear_probe"),
        make_record("fedavg_simclr", seed=1, value=30.0, card=LINEAR_CARD_1EP, task="linear_probe"),
    ]
    frame = _frame(records)
    with pytest.raises(CardMixError, match="2 protocol cards"):
        build_track(frame, track)
    with pytest.raises(CardMixError):
        check_single_card(frame, "column")
    pinned = dataclasses.replace(track, card_id=LINEAR_CARD.card_id)
    tt = build_track(frame, pinned)
    assert tt.card_id == LINEAR_CARD.card_id and tt.table["values"].tolist() == [[50.0]]
    assert tt.excluded_cards["card_id"].tolist() == [LINEAR_CARD_1EP.card_id]


def test_cards_that_select_on_test_are_excluded_from_main_columns() -> None:
    track = Track(id="c10-lin", title="lin", dataset="cifar10", task="linear_probe", min_seeds=1)
    records = [
        make_record("fedavg_simclr", seed=0, value=50.0, card=LINEAR_CARD, task="linear_probe"),
        make_record("orchestra", seed=0, value=90.0, card=DECSSL_PROBE_CARD, task="linear_probe"),
    ]
    tt = build_track(_frame(records), track)
    assert tt.table["method"].tolist() == ["fedavg_simclr"]
    assert tt.selects_on_test["method"].tolist() == ["orchestra"]


def test_unverified_records_are_marked() -> None:
    records = [
        make_record("fedu", seed=s, value=70.0 + s, runner="my-laptop-script") for s in range(3)
    ]
    table = build_track(_frame(records), TRACK).table
    assert table["verified"].tolist() == [False]


def test_corrupt_files_are_skipped_and_the_rest_builds(tmp_path: Path) -> None:
    write_records(tmp_path, standard_records())
    write_raw(tmp_path, "truncated.json", '{"schema_version": 1, "cell_id": "ab')
    write_raw(tmp_path, "future.json", json.dumps({"schema_version": 99}))
    write_raw(tmp_path, "list.json", "[1, 2, 3]")
    bad = json.loads(json.dumps(dataclasses.asdict(standard_records()[0]), default=list))
    bad["scores"][0]["values"] = {"top1": "high"}
    write_raw(tmp_path, "badvalue.json", json.dumps(bad))
    records, skipped = load_all([tmp_path, tmp_path / "nope"])
    assert len(records) == len(standard_records())
    reasons = {s.path.name: s.reason for s in skipped}
    assert set(reasons) == {"truncated.json", "future.json", "list.json", "badvalue.json", "nope"}
    assert "written by a newer fssl-bench" in reasons["future.json"]
    index = build_site([tmp_path], tmp_path / "site")
    page = (tmp_path / "site" / "skipped.html").read_text()
    for name in ("truncated.json", "future.json", "list.json", "badvalue.json"):
        assert name in page
    assert index.exists() and (tmp_path / "site" / "tracks" / "cifar10-knn.html").exists()


def test_duplicates_are_counted_once(tmp_path: Path) -> None:
    write_records(tmp_path / "a", standard_records())
    write_records(tmp_path / "b", standard_records()[:3])
    records, skipped = load_all([tmp_path / "a", tmp_path / "b"])
    assert len(records) == len(standard_records()) and not skipped


def test_references_are_shown_beside_ours_and_ranked_only_with_the_same_card(
    tmp_path: Path,
) -> None:
    refs = tmp_path / "ref"
    refs.mkdir()
    (refs / "paper_t1.yaml").write_text(f"""
source: "Some paper"
table: "Table 1"
metric: top1
unit: fraction
selection: final
settings: {{dataset: cifar10}}
columns:
  - {{label: "alpha 0.1 (their kNN)", card: knn/theirs, settings: {{alpha: 0.1}}}}
  - {{label: "alpha 0.1 (our card)", card: knn@v1, card_id: "{standard_records()[0].scores[0].card.card_id}",
      settings: {{alpha: 0.1}}}}
  - {{label: "alpha 0.1, cross-silo", card: knn@v1, card_id: "{standard_records()[0].scores[0].card.card_id}",
      settings: {{alpha: 0.1, num_clients: 10, participation: 1.0}}}}
rows:
  - {{label: "f-SimCLR", method: fedavg_simclr, values: [0.65, 0.66, 0.70]}}
""")
    model = build_model([], tracks=[TRACK], references_dir=refs)
    assert model.tracks[0].references and not model.reference_errors
    write_records(tmp_path / "res", standard_records())
    model = build_model([tmp_path / "res"], tracks=[TRACK], references_dir=refs)
    refs_shown = model.tracks[0].references
    # the cross-silo column (K = 10) is not shown on this cross-device track (K = 100)
    assert [x["ref"].column for x in refs_shown] == [
        "alpha 0.1 (their kNN)",
        "alpha 0.1 (our card)",
    ]
    assert [x["comparable"] for x in refs_shown] == [False, True]
    assert refs_shown[0]["would_rank"] is None
    # 66.0 between 73.0 and 62.0 at alpha 0.1 (fedu is incomplete)
    assert refs_shown[1]["would_rank"] == 2
    # the reported numbers never enter our table
    assert set(model.tracks[0].table["method"]) == {"fedavg_simclr", "orchestra", "fedu"}


def test_tracks_yaml_is_valid_and_strict() -> None:
    tracks = load_tracks()
    assert tracks and len({t.id for t in tracks}) == len(tracks)
    with pytest.raises(TrackError, match="unknown keys"):
        parse_tracks(
            {"tracks": [{"id": "x", "title": "x", "dataset": "d", "task": "knn", "min_seed": 3}]}
        )
    with pytest.raises(TrackError, match="slug"):
        parse_tracks({"tracks": [{"id": "X Y", "title": "x", "dataset": "d", "task": "knn"}]})


def test_data_json_rows_match_tables(tmp_path: Path) -> None:
    write_records(tmp_path / "res", standard_records())
    build_site([tmp_path / "res"], tmp_path / "site")
    data = json.loads((tmp_path / "site" / "data.json").read_text())
    track = next(t for t in data["tracks"] if t["id"] == "cifar10-knn")
    assert len(track["rows"]) == 9 and track["card"] == "knn@v1"
    orchestra_iid = next(
        r for r in track["rows"] if r["method"] == "orchestra" and r["partition_label"] == "iid"
    )
    assert (
        orchestra_iid["mean"] == 75.5
        and orchestra_iid["rank"] == 1
        and orchestra_iid["alpha"] is None
    )


def test_extra_scores_of_other_tasks_go_to_their_tracks() -> None:
    lin = TaskScores(
        task="linear_probe",
        card=LINEAR_CARD,
        main_metric="top1",
        higher_is_better=True,
        values={"top1": 40.0},
    )
    records = [make_record("fedu", seed=s, value=70.0, extra_scores=[lin]) for s in range(3)]
    track = Track(id="lin", title="lin", dataset="cifar10", task="linear_probe", card="linear@v1")
    assert build_track(_frame(records), track).table["mean"].tolist() == [40.0]


def test_two_configurations_of_one_method_are_two_rows_not_pooled_seeds() -> None:
    """Seeds of one configuration are averaged; another configuration of the same method (here
    another lr) is its own row, labelled, never averaged in as if it were a seed."""
    records = [make_record("fedavg_simclr", seed=s, value=70.0 + s) for s in range(3)]
    records += [
        make_record("fedavg_simclr", seed=s, value=40.0 + s, method_params={"lr": 0.1, "tau": 0.5})
        for s in range(3)
    ]
    table = build_track(_frame(records), TRACK).table
    rows = table[table["method"] == "fedavg_simclr"]
    assert sorted(rows["mean"]) == [41.0, 71.0] and set(rows["n_seeds"]) == {3}
    # both rows say which configuration they are
    assert all(rows["variant"]) and rows["variant"].nunique() == 2
    single = build_track(_frame(records[:3]), TRACK).table
    assert single["variant"].tolist() == [""]  # one configuration: no label needed


def test_a_public_carve_out_partition_creates_no_missing_rows() -> None:
    """FLESD partitions what is left after its public split, so its digest differs from the other
    methods' for the same partition setting: that is not a missing cell of anyone."""
    records = [make_record("fedavg_simclr", seed=s, value=70.0) for s in range(3)]
    flesd = [
        dataclasses.replace(make_record("flesd", seed=s, value=72.0), partition_digest="f" * 64)
        for s in range(3)
    ]
    table = build_track(_frame(records + flesd), TRACK).table
    assert "missing" not in set(table["status"])
    assert sorted(table["method"]) == ["fedavg_simclr", "flesd"]
