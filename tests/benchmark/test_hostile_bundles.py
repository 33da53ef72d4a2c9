"""A stranger's bundle cannot write, read or badge what it should not (issue 33).

Every case is crafted as the attacker did: a real smoke record edited and sealed again with the
project's own functions (``cell_id_of``, ``pretrain_key_of``, ``seal``), manifests with their
sha256s recomputed. Each case asserts the one-line refusal, the exit code the CLI documents for bad
input (2), and that nothing was written: the scratch folder's whole tree (inputs, the --results
folder, and the temporary folders, since TMPDIR points inside it) is the same before and after."""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmark.cli import main
from benchmark.records.files import read_record
from benchmark.records.integrity import seal
from benchmark.records.schema import ResultRecord, to_json
from tests.hostile import (
    TRACK,
    _Api,
    _Run,
    _sha,
    _tarball,
    accept_argv,
    bundle_dir,
    one_record_bundle,
    refused,
    renamed,
    reseal,
)

# ---- 1. names that become paths ------------------------------------------------------------------
TRAVERSALS = ["../../../ESCAPED", "ABSOLUTE"]


def _hostile_name(scratch: Path, kind: str) -> str:
    return "../../../ESCAPED" if kind == "../../../ESCAPED" else str(scratch / "ABS")


@pytest.mark.parametrize("kind", TRAVERSALS)
def test_accept_refuses_a_method_that_climbs_out_of_results(
    honest: ResultRecord, scratch: Path, capsys, kind: str
) -> None:
    bundle = one_record_bundle(scratch / "b", renamed(honest, _hostile_name(scratch, kind)))
    refused(scratch, capsys, accept_argv(scratch, bundle), "method", "is not a valid name")


@pytest.mark.parametrize("kind", TRAVERSALS)
def test_collect_refuses_a_method_that_climbs_out_of_results(
    honest: ResultRecord, scratch: Path, capsys, kind: str
) -> None:
    src = scratch / "src"
    src.mkdir()
    (src / f"{honest.cell_id}.json").write_text(
        to_json(honest)
    )  # an honest one beside it is not copied either
    bad = renamed(honest, _hostile_name(scratch, kind))
    (src / f"{bad.cell_id}.json").write_text(to_json(bad))
    refused(
        scratch,
        capsys,
        ["collect", "--from", str(src), "--results", str(scratch / "deep" / "er" / "res")],
        "method",
        "is not a valid name",
        "nothing collected",
    )


@pytest.mark.parametrize("kind", TRAVERSALS)
def test_wandb_collect_refuses_a_method_that_climbs_out_of_results(
    honest: ResultRecord, scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    import benchmark.submission.wandb_collect as wc

    bad = renamed(honest, _hostile_name(scratch, kind))
    api = _Api([_Run("good", to_json(honest)), _Run("bad", to_json(bad))])
    monkeypatch.setattr(wc, "_api", lambda: api)
    refused(
        scratch,
        capsys,
        ["collect", "--from", "wandb:me/proj", "--results", str(scratch / "deep" / "res")],
        "method",
        "is not a valid name",
    )


def test_results_path_confines_writes_even_when_the_schema_check_is_bypassed(
    honest: ResultRecord, tmp_path: Path
) -> None:
    """The second guard: a record built in memory (never read, never name-checked) cannot name a
    path outside."""
    from benchmark.records.names import UnsafeName, confined
    from benchmark.records.store import results_path

    with pytest.raises(UnsafeName):
        results_path(tmp_path, dataclasses.replace(honest, method="../../x"))
    with pytest.raises(UnsafeName, match="outside"):
        confined(tmp_path / "results", tmp_path / "results" / ".." / "x.json")
    assert results_path(tmp_path, honest).is_relative_to(tmp_path)


# ---- 2. records without scores -------------------------------------------------------------------
@pytest.mark.parametrize("status", ["diverged", "ok"])
def test_accept_refuses_a_record_without_scores(
    honest: ResultRecord, scratch: Path, capsys, status: str
) -> None:
    stripped = reseal(
        honest, scores=(), status=status, reason="forged" if status == "diverged" else None
    )
    bundle = one_record_bundle(scratch / "b", stripped)
    refused(scratch, capsys, accept_argv(scratch, bundle), "has no scores", "nothing re-run")


def test_an_acceptance_never_badges_a_record_without_scores(honest: ResultRecord) -> None:
    from benchmark.records.acceptance_files import make_acceptance, reevaluated

    stripped = reseal(honest, scores=(), status="diverged", reason="forged")
    acc = make_acceptance(
        stripped,
        [],
        checkpoint=None,
        git_sha="x",
        git_dirty=False,
        accepted_at="now",
        bundle_sha256=None,
    )
    assert "no scores" in str(reevaluated(stripped, acc))


# ---- 3. paths in the manifest, manifests of the wrong shape --------------------------------------
def test_manifest_files_outside_the_bundle_are_refused_unread(
    honest: ResultRecord, scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import benchmark.submission.bundle as bundle_mod

    opened: list[str] = []
    real = bundle_mod.file_sha256 if hasattr(bundle_mod, "file_sha256") else None
    assert real is None  # hashing happens in benchmark.core.canonical; watch it there
    from benchmark.core import canonical

    original = canonical.file_sha256
    monkeypatch.setattr(canonical, "file_sha256", lambda p: opened.append(str(p)) or original(p))
    rel = f"records/x/{honest.cell_id}/record.json"
    for i, outside in enumerate(["/dev/zero", "/proc/self/environ", "../../../etc/passwd"]):
        files = {rel: _sha(to_json(honest).encode()), outside: "0" * 64}
        manifest = {
            "track": TRACK,
            "files": files,
            "records": [{"path": rel, "cell_id": honest.cell_id, "checkpoint": None}],
        }
        bundle = bundle_dir(scratch / f"b{i}", {rel: to_json(honest)}, manifest)
        refused(
            scratch,
            capsys,
            accept_argv(scratch, bundle),
            repr(outside),
            "not a file inside the bundle",
        )
    assert not opened  # nothing hashed, let alone the device


@pytest.mark.parametrize("target", ["/dev/zero", "/proc/self/environ", "../outside.json"])
def test_a_record_path_outside_the_bundle_is_refused_unread(
    honest: ResultRecord, scratch: Path, capsys, target: str
) -> None:
    (scratch / "outside.json").write_text(to_json(honest))
    manifest = {
        "track": TRACK,
        "files": {},
        "records": [{"path": target, "cell_id": honest.cell_id, "checkpoint": None}],
    }
    bundle = bundle_dir(scratch / "b", {}, manifest)
    refused(scratch, capsys, accept_argv(scratch, bundle), "is not listed in the manifest's files")
    manifest["files"] = {target: "0" * 64}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    refused(scratch, capsys, accept_argv(scratch, bundle), "not a file inside the bundle")


def test_a_link_inside_a_folder_bundle_is_refused(
    honest: ResultRecord, scratch: Path, capsys
) -> None:
    bundle = one_record_bundle(scratch / "b", honest)
    (bundle / "zero").symlink_to("/dev/zero")
    refused(scratch, capsys, accept_argv(scratch, bundle), "zero is not a regular file")


@pytest.mark.parametrize(
    ("manifest", "needle"),
    [
        ("[]", "must be an object, got list"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (
            '{"files": {}, "records": ["records/x/record.json"]}',
            "records[0] must be an object, got str",
        ),
        ('{"files": [], "records": []}', "'files' must map paths"),
        ('{"files": {"a": "not-a-digest"}, "records": []}', "'files' must map paths"),
        ('{"files": {}, "records": []}', "'records' must be a non-empty list"),
        (
            '{"files": {}, "records": [{"path": 3, "cell_id": "x"}]}',
            "records[0].path must be a non-empty string",
        ),
        (
            '{"files": {}, "records": [{"path": "a", "cell_id": "x", "checkpoint": "f.pt"}]}',
            "checkpoint must be null",
        ),
        ("\u00ff\u00fe not json", "not valid JSON"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_refused_in_one_line(
    scratch: Path, capsys, manifest: str, needle: str
) -> None:
    bundle = bundle_dir(scratch / "b", {}, manifest)
    refused(scratch, capsys, accept_argv(scratch, bundle), needle)


def test_a_record_path_to_binary_data_is_refused(
    honest: ResultRecord, scratch: Path, capsys
) -> None:
    rel = "records/x/record.json"
    bundle = bundle_dir(
        scratch / "b",
        {rel: b"\x00\xff" * 1000},
        records=[{"path": rel, "cell_id": honest.cell_id, "checkpoint": None}],
    )
    refused(scratch, capsys, accept_argv(scratch, bundle), "records[0]", "cannot read")


def test_a_bundle_level_failure_stops_before_any_record_is_re_run(
    honest: ResultRecord, run_root: Path, scratch: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import benchmark.submission.accept_bundle as acc
    from benchmark.submission.submit_records import submit

    calls: list[str] = []
    monkeypatch.setattr(acc, "reevaluate", lambda *a, **k: calls.append("reevaluate") or ([], ""))
    bundle = scratch / "honest"
    report = submit([run_root], track=TRACK, out=bundle, manifests=None, reevaluate=False)
    assert report.ok, report.format()
    (bundle / "stowaway.bin").write_bytes(b"x")
    refused(scratch, capsys, accept_argv(scratch, bundle), "stowaway.bin is not in the manifest")
    assert calls == []


# ---- 10. a plugin the maintainer has not installed ----------------------------------------------
def test_accept_without_the_plugin_names_its_distribution_and_version(
    honest: ResultRecord, scratch: Path, capsys
) -> None:
    prov = {
        "module": "fssl_fedsimsiam.method",
        "distribution": "fssl-fedsimsiam",
        "version": "0.1.0",
        "source_digest": "ab" * 32,
        "files": 2,
    }
    plugin = renamed(honest, "fedsimsiam")
    plugin = seal(
        dataclasses.replace(
            plugin, env=dataclasses.replace(plugin.env, plugins={"method:fedsimsiam": prov})
        )
    )
    refused(
        scratch,
        capsys,
        accept_argv(scratch, one_record_bundle(scratch / "b", plugin)),
        "method 'fedsimsiam' is not installed here",
        "pip install 'fssl-fedsimsiam==0.1.0'",
    )


def test_accept_refuses_an_installed_method_whose_sources_differ(
    honest: ResultRecord, scratch: Path, capsys
) -> None:
    """The record claims plugin code for fedavg_simclr; the installed one is in-tree (no digest)."""
    prov = {
        "module": "fssl_x.method",
        "distribution": "fssl-x",
        "version": "1.0",
        "source_digest": "cd" * 32,
        "files": 1,
    }
    claimed = seal(
        dataclasses.replace(
            honest, env=dataclasses.replace(honest.env, plugins={"method:fedavg_simclr": prov})
        )
    )
    refused(
        scratch,
        capsys,
        accept_argv(scratch, one_record_bundle(scratch / "b", claimed)),
        "is built in here, but the record ran it from the plugin fssl-x 1.0",
        "source digest cdcdcdcdcdcd…",
    )


# ---- 4. bounds -----------------------------------------------------------------------------------
def test_a_tar_bomb_is_refused_from_its_headers(scratch: Path, capsys) -> None:
    bomb = _tarball(
        scratch / "bomb.tar.gz", [("manifest.json", b"{}", b""), ("zeros", bytes(5 << 20), b"")]
    )
    assert bomb.stat().st_size < 64 << 10  # 5 MB of zeros in a few kB
    refused(
        scratch,
        capsys,
        accept_argv(scratch, bomb, "--max-total-mb", "1", "--max-file-mb", "100"),
        "more than 1 MB uncompressed",
        "--max-total-mb",
    )
    refused(
        scratch,
        capsys,
        accept_argv(scratch, bomb, "--max-file-mb", "1"),
        "zeros holds 5,242,880 bytes",
        "--max-file-mb",
    )
    many = _tarball(scratch / "many.tar.gz", [(f"f{i}", b"x", b"") for i in range(20)])
    refused(
        scratch, capsys, accept_argv(scratch, many, "--max-members", "10"), "more than 10 files"
    )


def test_links_in_a_tarball_are_refused(scratch: Path, capsys) -> None:
    tar = _tarball(
        scratch / "link.tar.gz", [("manifest.json", b"{}", b""), ("z", None, b"/dev/zero")]
    )
    refused(scratch, capsys, accept_argv(scratch, tar), "'z' is not a regular file")
    climb = _tarball(scratch / "climb.tar.gz", [("../../x", b"x", b"")])
    refused(scratch, capsys, accept_argv(scratch, climb), "'../../x' refused")


def test_extraction_stops_at_the_limit_whatever_the_headers_said(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enforced while writing too: the header check off, the byte count stops the extraction."""
    import benchmark.submission.bundle as bundle_mod
    from benchmark.submission import tarscan
    from benchmark.submission.bundle import BundleError, BundleLimits

    monkeypatch.setattr(bundle_mod, "_check_sizes", lambda *a, **k: None)
    monkeypatch.setattr(tarscan, "_sizes", lambda *a, **k: None)
    bomb = _tarball(scratch / "bomb.tar.gz", [("zeros", bytes(3 << 20), b"")])
    with pytest.raises(BundleError, match="more than 1 MB"):
        bundle_mod.extract(bomb, scratch / "out", BundleLimits(max_total_bytes=1 << 20))
    assert (scratch / "out" / "zeros").stat().st_size <= 1 << 20


def test_a_runaway_task_configuration_is_refused_before_it_runs(
    honest: ResultRecord, scratch: Path, capsys
) -> None:
    def runaway(cell: dict) -> None:
        cell["tasks"].append({"name": "linear_probe", "params": {"epochs": 10**7}, "version": "1"})

    bundle = one_record_bundle(scratch / "b", reseal(honest, edit_cell=runaway))
    refused(
        scratch,
        capsys,
        accept_argv(scratch, bundle),
        "epochs 10000000 exceeds the card linear@v1's",
    )


def test_accept_checks_the_pretrain_key_and_the_track_as_submit_does(
    honest: ResultRecord, scratch: Path, capsys
) -> None:
    wrong_key = seal(dataclasses.replace(honest, pretrain_key="0" * 16))
    refused(
        scratch,
        capsys,
        accept_argv(scratch, one_record_bundle(scratch / "a", wrong_key)),
        "identity: pretrain_key",
    )

    def more_clients(cell: dict) -> None:
        cell["fl"]["num_clients"] = 3

    refused(
        scratch,
        capsys,
        accept_argv(
            scratch, one_record_bundle(scratch / "b", reseal(honest, edit_cell=more_clients))
        ),
        "track: fl.num_clients=3",
    )
    refused(
        scratch,
        capsys,
        accept_argv(scratch, one_record_bundle(scratch / "c", honest), "--track", "nope"),
        "unknown track 'nope'",
    )


def test_an_interrupted_accept_leaves_no_temporary_folder(
    run_root: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import benchmark.submission.accept_bundle as acc
    from benchmark.submission.submit_records import submit

    tarball = scratch / "honest.tar.gz"
    assert submit([run_root], track=TRACK, out=tarball, manifests=None, reevaluate=False).ok

    def interrupt(*a: Any, **k: Any) -> Any:
        assert any(
            (scratch / "tmp").iterdir()
        )  # the bundle is extracted under TMPDIR while it runs
        raise KeyboardInterrupt

    monkeypatch.setattr(acc, "reevaluate", interrupt)
    with pytest.raises(KeyboardInterrupt):
        acc.accept(tarball, scratch / "results")
    assert list((scratch / "tmp").iterdir()) == [] and not (scratch / "results").exists()


# ---- 5. the badge stands on the reproduced number ------------------------------------------------
def test_a_score_raised_within_the_tolerance_shows_as_reproduced(
    run_root: Path, tmp_path: Path, capsys
) -> None:
    from benchmark.records.acceptance_files import acceptance_path, read_acceptance
    from benchmark.submission.submit_records import submit
    from leaderboard.build import build_model
    from leaderboard.site import build_site

    bundle = tmp_path / "b"
    assert submit([run_root], track=TRACK, out=bundle, manifests=None, reevaluate=False).ok
    manifest = json.loads((bundle / "manifest.json").read_text())
    entry = manifest["records"][0]
    record = read_record(bundle / entry["path"])
    honest_top1 = record.score("knn").values["top1"]
    score = dataclasses.replace(record.score("knn"), values={"top1": honest_top1 + 0.4})
    raised = seal(dataclasses.replace(record, scores=(score,)))
    (bundle / entry["path"]).write_text(to_json(raised))
    manifest["files"][entry["path"]] = entry["sha256"] = _sha((bundle / entry["path"]).read_bytes())
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    results = tmp_path / "results"
    assert main(["accept", str(bundle), "--results", str(results)]) == 0, capsys.readouterr()
    acc = read_acceptance(acceptance_path(results, raised.cell_id))
    assert acc["scores"][0]["reproduced"] == pytest.approx(honest_top1)
    model = build_model([results])
    (table,) = [t.table for t in model.tracks if t.track.id == TRACK]
    (row,) = table[table["method"] == raised.method].to_dict("records")
    assert row["reevaluated"] and row["values"] == [pytest.approx(honest_top1)]
    assert row["reported_values"] == [pytest.approx(honest_top1 + 0.4)]
    build_site([results], tmp_path / "site")
    page = (tmp_path / "site" / "tracks" / f"{TRACK}.html").read_text()
    assert f"{honest_top1:.2f}" in page and f"reported {honest_top1 + 0.4:.2f}" in page


# ---- 6. the site ---------------------------------------------------------------------------------
def test_a_carriage_return_cannot_start_a_formula_row(tmp_path: Path) -> None:
    import csv

    import pandas as pd

    from leaderboard.exports import write_csv

    hostile = ["x\r=cmd|' /C calc'!A0", " =1+1", "\r\n@SUM(A1)", "\t-2", "ok"]
    write_csv(tmp_path / "t.csv", pd.DataFrame({"method": hostile, "n": range(5)}))
    text = (tmp_path / "t.csv").read_bytes().decode()
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) == 6 and rows[-1] == [
        "ok",
        "4",
    ]  # the CR stays inside its quoted field: no new row
    assert rows[1][0] == hostile[0]  # one cell that starts with "x": not a formula
    for (cell, _), original in zip(
        rows[2:5], hostile[1:4]
    ):  # a formula after blanks or line breaks: neutralised
        assert cell == "'" + original
    quoted = io.StringIO()
    csv.writer(quoted, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    assert text == quoted.getvalue()  # every field quoted


def test_a_cr_in_a_method_name_is_refused_where_records_are_read(
    honest: ResultRecord, scratch: Path, capsys
) -> None:
    bundle = one_record_bundle(scratch / "b", renamed(honest, "x\r=cmd|' /C calc'!A0"))
    refused(scratch, capsys, accept_argv(scratch, bundle), "x\\r=cmd", "is not a valid name")


WRONG_TYPES: dict[str, Callable[[ResultRecord], ResultRecord]] = {
    "plugins": lambda r: seal(
        dataclasses.replace(r, env=dataclasses.replace(r.env, plugins={"method:x": {}}))
    ),
    "task_failures": lambda r: seal(dataclasses.replace(r, task_failures=["knn"])),
    "bytes_up": lambda r: seal(
        dataclasses.replace(r, comm=dataclasses.replace(r.comm, bytes_up="12"))
    ),  # type: ignore[arg-type]
    "cell.fl": lambda r: reseal(r, edit_cell=lambda c: c.__setitem__("fl", [1, 2])),
}
REASONS = {
    "plugins": "env.plugins['method:x'] lacks",
    "task_failures": "record.task_failures has the wrong type",
    "bytes_up": "record.comm.bytes_up has the wrong type",
    "cell.fl": "record.cell.fl must be an object",  # the schema (issue 39), before the tables
}


def test_records_of_the_wrong_shape_go_to_the_skipped_page(
    honest: ResultRecord, tmp_path: Path
) -> None:
    from leaderboard.site import build_site

    results = tmp_path / "results" / "records" / "v1"
    for name, make in WRONG_TYPES.items():
        bad = make(honest)
        (results / name).mkdir(parents=True)
        (results / name / f"{bad.cell_id}.json").write_text(to_json(bad))
    (results / "fedavg_simclr").mkdir()
    (results / "fedavg_simclr" / f"{honest.cell_id}.json").write_text(to_json(honest))
    build_site([tmp_path / "results"], tmp_path / "site")  # does not raise
    skipped = (tmp_path / "site" / "skipped.html").read_text()
    for name, reason in REASONS.items():
        assert reason.replace("'", "&#39;") in skipped, name
    assert honest.cell_id in (tmp_path / "site" / "tracks" / f"{TRACK}.html").read_text()


@pytest.mark.parametrize("name", ["plugins", "task_failures", "bytes_up"])
def test_accept_refuses_records_of_the_wrong_shape(
    honest: ResultRecord, scratch: Path, capsys, name: str
) -> None:
    bundle = one_record_bundle(scratch / "b", WRONG_TYPES[name](honest))
    refused(scratch, capsys, accept_argv(scratch, bundle), REASONS[name])


# ---- 7. checkpoints load as tensors --------------------------------------------------------------
class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_a_round_checkpoint_cannot_run_code(tmp_path: Path) -> None:
    import torch

    from benchmark.engine.checkpoints import load_round_checkpoint

    marker = tmp_path / "ran"
    torch.save({"model": {}, "clients": _Payload(marker)}, tmp_path / "round.pt")
    with pytest.raises(Exception, match="Weights only load failed"):
        load_round_checkpoint(tmp_path / "round.pt")
    assert not marker.exists()
