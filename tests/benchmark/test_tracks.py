"""One membership rule for a track (``Track.admits``), used by the site build and by ``submit``: the
two copies had drifted (submit let hyperparameter-selection records, scored on the validation split,
onto a track)."""

from __future__ import annotations

import dataclasses

import pytest

from benchmark.records.identity import cell_id_of
from benchmark.records.tracks import Track, TrackError, find_track, parse_tracks
from tests.benchmark.test_records import record as _record

CELL = {
    "dataset": {"name": "digits", "version": "1", "params": {"size": 16}},
    "backbone": {"name": "resnet_micro", "version": "1", "params": {}},
    "method": {"name": "fedavg_simclr", "version": "1", "params": {}},
    "fl": {"num_clients": 2},
    "seed": 0,
}


def record(**kw):
    return _record(cell=CELL, cell_id=cell_id_of(CELL), **kw)


TRACK = Track(
    id="digits-knn", title="t", dataset="digits", task="knn", federation={"num_clients": 2}
)


def _with_cell(r, **changes):
    cell = {**r.cell, **changes}
    return dataclasses.replace(r, cell=cell, cell_id=cell_id_of(cell))


def test_admits_names_the_reason() -> None:
    r = record()
    assert TRACK.admits(r) is None
    assert "dataset" in TRACK.admits(dataclasses.replace(r, dataset="cifar10"))
    val = _with_cell(
        r,
        dataset={
            **r.cell["dataset"],
            "params": {**r.cell["dataset"].get("params", {}), "eval_split": "validation"},
        },
    )
    assert "validation split" in TRACK.admits(val)
    assert "fl.num_clients" in TRACK.admits(_with_cell(r, fl={**r.cell["fl"], "num_clients": 10}))
    assert "no score" in TRACK.admits(dataclasses.replace(r, scores=()))
    # shown as such
    assert TRACK.admits(dataclasses.replace(r, scores=(), status="diverged", reason="nan")) is None


def test_submit_and_the_build_share_it() -> None:
    import leaderboard.site_config as lb
    from benchmark.submission import submit_records as submit

    assert lb.Track is Track and submit.Track is Track


def test_loader_is_strict() -> None:
    with pytest.raises(TrackError, match="unknown keys"):
        parse_tracks(
            {"tracks": [{"id": "a", "title": "t", "dataset": "d", "task": "knn", "colour": "red"}]}
        )
    tracks = parse_tracks({"tracks": [{"id": "a-b", "title": "t", "dataset": "d", "task": "knn"}]})
    with pytest.raises(TrackError, match="Did you mean 'a-b'"):
        find_track(tracks, "a_b")
