"""submit: records are validated (schema, identity, integrity, partition, track, seeds) before they
reach the leaderboard, and a bundle with sha256s and provenance is written only when every record
passes."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from benchmark.commands.check_method import smoke_cell
from benchmark.engine.runner import run_cell
from benchmark.submission.bundle import verify_bundle
from benchmark.submission.submit_records import submit
from tests.cell_cache import cached_run

TRACKS = """
tracks:
  - {id: digits-test, title: t, dataset: digits, task: knn, card: knn@v1, federation: {num_clients: 2}, min_seeds: 1}
  - {id: digits-3seeds, title: t, dataset: digits, task: knn, card: knn@v1, min_seeds: 3}
  - {id: digits-cross-device, title: t, dataset: digits, task: knn, federation: {num_clients: 100}, min_seeds: 1}
  - {id: digits-linear, title: t, dataset: digits, task: linear_probe, min_seeds: 1}
"""


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    # no_pretrain: no training, so the real runner writes real records in seconds
    for seed in (0, 1):
        cached_run(smoke_cell("no_pretrain", tasks=["knn"], seed=seed), root, tmp_path_factory)
    return root


@pytest.fixture()
def root(run_root: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "runs"
    shutil.copytree(run_root, dst)
    return dst


@pytest.fixture()
def tracks(tmp_path: Path) -> Path:
    path = tmp_path / "tracks.yaml"
    path.write_text(TRACKS, encoding="utf-8")
    return path


def records(root: Path) -> list[Path]:
    return sorted(root.glob("no_pretrain/*/record.json"))


def edit(path: Path, change) -> None:
    raw = json.loads(path.read_text())
    change(raw)
    path.write_text(json.dumps(raw, sort_keys=True, indent=2) + "\n")


def edit_external(path: Path, change) -> None:
    """An edit standing for a record another runner wrote: that runner seals its own record (a
    digest is no signature: anyone can compute one), so only the checks under test can catch it."""
    from benchmark.records.files import read_record
    from benchmark.records.integrity import seal

    edit(path, change)
    from benchmark.records.schema import to_json

    path.write_text(to_json(seal(read_record(path))))


def failed_checks(report) -> set[str]:
    return {r.split(":", 1)[0] for r in report.reasons()}


def test_valid_records_make_a_verified_bundle(root: Path, tracks: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle.tar.gz"
    report = submit(records(root), track="digits-test", out=out, tracks_file=tracks, manifests=None)
    assert report.ok, report.format()
    assert out.exists() and verify_bundle(out) == []
    with tarfile.open(out) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        names = set(tar.getnames())
    assert manifest["track"] == "digits-test" and len(manifest["records"]) == 2
    for entry in manifest["records"]:
        assert (
            entry["provenance"]["runner"] == "fssl-bench"
            and entry["provenance"]["verified"] is True
        )
        assert entry["path"] in names and entry["sha256"] == manifest["files"][entry["path"]]
    assert any("/scores/knn-" in n for n in names)  # the sidecars travel with the record
    # a bundle is itself submittable (its records keep their sidecars next to them)
    extracted = tmp_path / "x"
    with tarfile.open(out) as tar:
        tar.extractall(extracted, filter="data")
    again = submit(
        [extracted / "records"], track="digits-test", out=None, tracks_file=tracks, manifests=None
    )
    assert again.ok, again.format()


def test_edited_scores_are_rejected(root: Path, tracks: Path, tmp_path: Path) -> None:
    path = records(root)[0]
    edit(
        path, lambda r: r["scores"][0]["values"].update(top1=r["scores"][0]["values"]["top1"] + 5.0)
    )
    report = submit(
        [path], track="digits-test", out=tmp_path / "b", tracks_file=tracks, manifests=None
    )
    assert not report.ok and report.bundle is None and not (tmp_path / "b").exists()
    # the cell id still matches: scores are not in it
    assert failed_checks(report) == {"integrity"}, report.format()
    assert "edited after it was written" in report.format()


def test_edited_cell_breaks_the_cell_id(root: Path, tracks: Path) -> None:
    path = records(root)[0]
    edit(path, lambda r: r["cell"]["fl"].update(rounds=100))
    report = submit([path], track="digits-test", tracks_file=tracks, manifests=None)
    assert "identity" in failed_checks(report)
    assert "does not match the cell's content" in report.format()


def test_partition_digest_other_than_the_tracks_is_rejected(
    root: Path, tracks: Path, tmp_path: Path
) -> None:
    # an external record (no runner sidecars, so only the partition check can catch it) with another
    # split
    copy = tmp_path / "external.json"
    shutil.copy(records(root)[0], copy)
    edit_external(
        copy, lambda r: (r.update(partition_digest="0" * 64), r["env"].update(runner="my-own-loop"))
    )
    report = submit([copy], track="digits-test", tracks_file=tracks, manifests=None)
    assert failed_checks(report) == {"partition"}, report.format()
    assert "differs from the track's official partition" in report.format()


def test_partition_digest_edited_in_a_run_is_rejected_twice(root: Path, tracks: Path) -> None:
    path = records(root)[0]
    edit(path, lambda r: r.update(partition_digest="f" * 64))
    assert {"partition", "integrity"} <= failed_checks(
        submit([path], track="digits-test", tracks_file=tracks, manifests=None)
    )


def test_leaderboard_digest_disagreement_is_rejected(
    root: Path, tracks: Path, tmp_path: Path
) -> None:
    """A record already on the leaderboard fixes the partition digest too (datasets that cannot be
    recomputed)."""
    board = tmp_path / "board"
    board.mkdir()
    on_board = board / f"{records(root)[1].parent.name}.json"  # results/ names records by cell id
    shutil.copy(records(root)[1], on_board)
    edit(on_board, lambda r: r.update(partition_digest="a" * 64))
    report = submit(
        [records(root)[0]], track="digits-test", tracks_file=tracks, against=[board], manifests=None
    )
    assert "partition" in failed_checks(report)


def test_external_records_are_accepted_as_unverified(
    root: Path, tracks: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "external.json"
    shutil.copy(records(root)[0], copy)
    edit_external(copy, lambda r: r["env"].update(runner="my-own-loop"))
    report = submit(
        [copy], track="digits-test", out=tmp_path / "bundle", tracks_file=tracks, manifests=None
    )
    assert report.ok, report.format()
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["records"][0]["provenance"] == {
        "runner": "my-own-loop",
        "git_sha": manifest["records"][0]["provenance"]["git_sha"],
        "git_dirty": manifest["records"][0]["provenance"]["git_dirty"],
        "sealed": False,
        "reevaluated": False,
        "verified": False,
    }


def test_runner_record_without_its_sidecars_is_rejected(
    root: Path, tracks: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copied.json"
    shutil.copy(records(root)[0], copy)
    report = submit([copy], track="digits-test", tracks_file=tracks, manifests=None)
    assert failed_checks(report) == {"integrity"} and "no runner sidecars" in report.format()


def test_schema_version_and_track_and_seed_count(root: Path, tracks: Path) -> None:
    path = records(root)[0]
    few = submit(records(root), track="digits-3seeds", tracks_file=tracks, manifests=None)
    assert (
        failed_checks(few) == {"seeds"} and "2 seed(s) [0, 1], the track requires 3" in few.format()
    )
    for track in ("digits-cross-device", "digits-linear"):  # not on the track: left out, or
        off = submit([path], track=track, tracks_file=tracks, manifests=None)
        assert not off.ok and not off.checks and len(off.left_out) == 1, off.format()
        assert "no record is on the track" in off.format()
        strict = submit([path], track=track, tracks_file=tracks, manifests=None, strict=True)
        assert failed_checks(strict) == {"track"}  # with --strict, rejected
    edit(path, lambda r: r.update(schema_version=0))
    assert failed_checks(
        submit([path], track="digits-test", tracks_file=tracks, manifests=None)
    ) == {"schema"}


def test_edited_card_is_rejected(root: Path, tracks: Path, tmp_path: Path) -> None:
    copy = tmp_path / "external.json"
    shutil.copy(records(root)[0], copy)
    edit_external(
        copy,
        lambda r: (r["scores"][0]["card"]["settings"].update(k=20), r["env"].update(runner="x")),
    )
    report = submit([copy], track="digits-test", tracks_file=tracks, manifests=None)
    assert failed_checks(report) == {"track"} and "the registered task builds" in report.format()


def test_submit_reevaluates_by_default(root: Path, tracks: Path) -> None:
    report = submit(records(root)[:1], track="digits-test", tracks_file=tracks, manifests=None)
    assert report.ok and report.checks[0].reevaluated, report.format()
    assert report.checks[0].score_checks and all(c.ok for c in report.checks[0].score_checks)
    skipped = submit(
        records(root)[:1], track="digits-test", tracks_file=tracks, manifests=None, reevaluate=False
    )
    assert skipped.ok and not skipped.checks[0].reevaluated and not skipped.checks[0].score_checks


def test_tampered_bundle_is_detected(root: Path, tracks: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert submit(
        records(root), track="digits-test", out=out, tracks_file=tracks, manifests=None
    ).ok
    rec = next(out.glob("records/*/*/record.json"))
    edit(rec, lambda r: r["scores"][0]["values"].update(top1=99.0))
    assert any("sha256" in p for p in verify_bundle(out))


def test_cli(root: Path, tracks: Path, tmp_path: Path) -> None:
    from benchmark.cli import main

    out = tmp_path / "cli-bundle"
    assert (
        main(
            [
                "submit",
                *map(str, records(root)),
                "--track",
                "digits-test",
                "--tracks",
                str(tracks),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert (out / "manifest.json").exists()
    edit(records(root)[0], lambda r: r["scores"][0]["values"].update(top1=1.0))
    assert (
        main(["submit", str(records(root)[0]), "--track", "digits-test", "--tracks", str(tracks)])
        == 1
    )
    assert main(["submit", str(records(root)[1]), "--track", "nope", "--tracks", str(tracks)]) == 2


def test_records_off_the_track_are_left_out_before_any_re_evaluation(
    root: Path, tracks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: a folder holding records of another task or federation was refused whole, after
    re-evaluating everything. Membership is decided first: the on-track records are bundled, the
    others listed as left out and never re-evaluated."""
    import benchmark.submission.checks as checks_mod

    run_cell(smoke_cell("no_pretrain", tasks=["knn"], clients=3), root, device="cpu")
    reevaluated: list[int] = []
    real = checks_mod._reevaluate
    monkeypatch.setattr(
        checks_mod,
        "_reevaluate",
        lambda record, *a, **k: (
            reevaluated.append(record.cell["fl"]["num_clients"]),
            real(record, *a, **k),
        ),
    )
    out = tmp_path / "bundle"
    report = submit([root], track="digits-test", out=out, tracks_file=tracks, manifests=None)
    assert report.ok and len(report.checks) == 2, report.format()
    assert [why for _, _, why in report.left_out] == ["fl.num_clients=3 is not the track's 2"]
    assert reevaluated == [2, 2]  # the off-track record was never re-evaluated
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["records"]) == 2
    assert "1 left out (not on the track, not bundled)" in report.format()
    assert "LEFT OUT" in report.format()
    strict = submit([root], track="digits-test", tracks_file=tracks, manifests=None, strict=True)
    assert not strict.ok and failed_checks(strict) == {"track"}


SMOKE_GRID = """
name: smoke_like
base:
  dataset: digits
  backbone: {name: resnet_micro, width: 4}
  partition: iid
  fl: {num_clients: 2, participation: 1.0, rounds: ROUNDS, local_epochs: 1}
  tasks: [knn]
method_common: {batch_size: 16}
axes:
  method: [fedavg_simclr]
  seed: [0]
"""


@pytest.mark.parametrize("rounds", [1, 2])
def test_submit_checks_the_records_settings_are_the_tracks_grid(
    root: Path, tmp_path: Path, rounds: int
) -> None:
    """Issue 47: a track names its grid; a record whose cell (but for its method and seed) is no
    cell of that grid is rejected, naming what differs and the command that runs the grid itself
    with the method added. The no_pretrain records are not in the grid's method axis: their
    settings are what counts."""
    grid = tmp_path / "smoke_like.yaml"
    grid.write_text(SMOKE_GRID.replace("ROUNDS", str(rounds)), encoding="utf-8")
    tracks = tmp_path / "tracks.yaml"
    tracks.write_text(
        "tracks:\n  - {id: digits-grid, title: t, dataset: digits, task: knn, min_seeds: 1, "
        f"grid: '{grid}'}}\n",
        encoding="utf-8",
    )
    report = submit(
        records(root), track="digits-grid", tracks_file=tracks, manifests=None, reevaluate=False
    )
    if rounds == 1:
        assert report.ok, report.format()
    else:
        assert failed_checks(report) == {"settings"}, report.format()
        assert "the cell's fl differ from every cell of the track's grid" in report.format()
        assert "--add-method no_pretrain" in report.format()
