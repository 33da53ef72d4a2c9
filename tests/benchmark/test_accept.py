"""Trust that does not rest on the submitter (issue 19): a bundle carries the encoder checkpoint of
its records, ``submit`` re-evaluates by default, ``accept`` re-runs the tasks from the checkpoint
and marks the records it reproduced, and the site tells re-evaluated rows from reported ones.

One real smoke cell (fedavg_simclr, 1 round, kNN and a 1-epoch linear probe on digits) is
pre-trained once for the module; its checkpoint is what every test re-evaluates.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.commands.check_method import smoke_cell
from benchmark.records.acceptance_files import (
    acceptance_path,
    find_acceptances,
    read_acceptance,
    reevaluated,
    tolerance_for,
)
from benchmark.records.files import read_record
from benchmark.records.store import collect, verify_record
from benchmark.submission.bundle import verify_bundle
from benchmark.submission.submit_records import submit
from tests.cell_cache import cached_run

TRACK = "digits-smoke-knn"  # leaderboard/site_config.yaml: digits, K = 2, knn@v1, one seed


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    cell = smoke_cell("fedavg_simclr", tasks=["knn", {"name": "linear_probe", "epochs": 1}])
    return cached_run(cell, root, tmp_path_factory)


@pytest.fixture(scope="module")
def bundle(run_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The honest bundle, written by submit with its default re-evaluation."""
    out = tmp_path_factory.mktemp("bundle") / "honest"
    report = submit([run_root], track=TRACK, out=out, manifests=None)
    assert report.ok and report.bundle == out, report.format()
    return out


@pytest.fixture(scope="module")
def accepted(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """results/ after ``python -m benchmark accept`` of the honest bundle: (results, exit code,
    output)."""
    import contextlib
    import io

    results = tmp_path_factory.mktemp("results")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["accept", str(bundle), "--results", str(results)])
    return results, code, buf.getvalue()


def _manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_bundle_carries_the_checkpoint_with_its_size_and_sha256(
    bundle: Path, run_root: Path
) -> None:
    manifest = _manifest(bundle)
    (entry,) = manifest["records"]
    ckpt = entry["checkpoint"]
    final = run_root / "_pretrain" / read_record(bundle / entry["path"]).pretrain_key / "final.pt"
    assert (
        ckpt["path"].endswith("/final.pt")
        and (bundle / ckpt["path"]).read_bytes() == final.read_bytes()
    )
    assert ckpt["bytes"] == final.stat().st_size and ckpt["sha256"] == _sha(final)
    assert manifest["files"][ckpt["path"]] == ckpt["sha256"]
    assert (
        manifest["size"]["checkpoint_bytes"] == ckpt["bytes"]
        and manifest["size"]["checkpoints"] == 1
    )
    assert (
        manifest["reevaluation"]["by_submitter"] is True
        and entry["provenance"]["reevaluated"] is True
    )
    assert manifest["reevaluation"]["tolerance"] == {
        "knn": tolerance_for("knn"),
        "linear_probe": tolerance_for("linear_probe"),
    }
    assert verify_bundle(bundle) == []


def test_accept_reproduces_an_honest_bundle_and_marks_its_records(
    accepted: tuple[Path, int, str], bundle: Path
) -> None:
    results, code, out = accepted
    assert code == 0, out
    record = read_record(bundle / _manifest(bundle)["records"][0]["path"])
    copied = results / "records" / "v1" / record.method / f"{record.cell_id}.json"
    # the record itself is copied untouched: its own digest still verifies
    assert read_record(copied) == record
    acc = read_acceptance(acceptance_path(results, record.cell_id))
    assert acc["record_digest"] == record.digest and reevaluated(record, acc) is None
    # its traffic is what fedavg_simclr declares it sends (issue 52, item 2)
    assert acc["traffic"] == {"derived": True}
    reported = {(s.task, k): v for s in record.scores for k, v in s.values.items()}
    reproduced = {(s["task"], s["key"]): s["reproduced"] for s in acc["scores"]}
    assert (
        set(reproduced)
        == set(reported)
        == {("knn", "top1"), ("linear_probe", "top1"), ("linear_probe", "top5")}
    )
    # measured: a CPU rerun on one machine is bit for bit the same
    for key, value in reported.items():
        assert abs(reproduced[key] - value) <= tolerance_for(key[0])
    assert (
        acc["fssl_bench"]["git_sha"]
        and acc["checkpoint"]["sha256"] == _manifest(bundle)["records"][0]["checkpoint"]["sha256"]
    )


def _forge(bundle: Path, out: Path, task: str, key: str, delta: float) -> None:
    """A deliberate forgery: the score raised in the record and in its sidecar, the record's digest
    recomputed and every sha256 of the manifest updated — everything a submitter can do without the
    checkpoint's help."""
    from benchmark.records.integrity import seal
    from benchmark.records.schema import to_json

    shutil.copytree(bundle, out)
    manifest = _manifest(out)
    entry = manifest["records"][0]
    path = out / entry["path"]
    raw = json.loads(path.read_text())
    score = next(s for s in raw["scores"] if s["task"] == task)
    score["values"][key] += delta
    path.write_text(json.dumps(raw))
    path.write_text(to_json(seal(read_record(path))))
    for side in (path.parent / "scores").glob(f"{task}-*.json"):
        side_raw = json.loads(side.read_text())
        side_raw["values"][key] += delta
        side.write_text(json.dumps(side_raw, indent=2, sort_keys=True) + "\n")
    for rel in manifest["files"]:
        manifest["files"][rel] = _sha(out / rel)
    entry["sha256"] = manifest["files"][entry["path"]]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))


def test_accept_rejects_a_bundle_whose_score_was_raised(
    bundle: Path, tmp_path: Path, capsys
) -> None:
    forged = tmp_path / "forged"
    _forge(bundle, forged, "knn", "top1", 3.0)
    record = read_record(forged / _manifest(forged)["records"][0]["path"])
    # integrity alone cannot tell
    assert verify_record(record) == [] and verify_bundle(forged) == []
    results = tmp_path / "results"
    assert main(["accept", str(forged), "--results", str(results)]) == 1
    out = capsys.readouterr().out
    fails = [line for line in out.splitlines() if line.strip().startswith("FAIL")]
    assert len(fails) == 1, out  # one line per failing score; the untouched linear probe reproduces
    claimed = record.score("knn").values["top1"]
    assert re.search(
        rf"knn top1 .*reported {claimed:.4f}, reproduced {claimed - 3.0:.4f}", fails[0]
    ), fails[0]
    # nothing copied, nothing marked
    assert not results.exists() or not any(results.rglob("*.json"))


def test_accept_checks_the_record_digest_and_the_checkpoint_sha256(
    bundle: Path, tmp_path: Path, capsys
) -> None:
    """Refused in one line before anything is re-run (exit 2): a file that does not match the
    manifest, a record whose digest does not match its content, a checkpoint whose entry disagrees
    with the manifest's files."""
    edited = tmp_path / "edited"
    shutil.copytree(bundle, edited)
    entry = _manifest(edited)["records"][0]
    ckpt = edited / entry["checkpoint"]["path"]
    ckpt.write_bytes(ckpt.read_bytes() + b"\0")
    assert main(["accept", str(edited), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert "final.pt does not match its sha256" in err and len(err.strip().splitlines()) == 1
    # the record edited, every sha256 of the manifest updated: the record's own digest refuses it
    resealed = tmp_path / "resealed"
    shutil.copytree(bundle, resealed)
    manifest = _manifest(resealed)
    rec = resealed / manifest["records"][0]["path"]
    rec.write_text(rec.read_text().replace('"seed": 0', '"seed": 5', 1))  # no digest recomputed
    manifest["files"][manifest["records"][0]["path"]] = _sha(rec)
    (resealed / "manifest.json").write_text(json.dumps(manifest))
    assert main(["accept", str(resealed), "--results", str(tmp_path / "results")]) == 2
    assert "digest mismatch" in capsys.readouterr().err
    # the checkpoint alone (everything else honest, the manifest's file list updated): its sha256 in
    # the entry
    swapped = tmp_path / "swapped"
    shutil.copytree(bundle, swapped)
    manifest = _manifest(swapped)
    ckpt = swapped / manifest["records"][0]["checkpoint"]["path"]
    ckpt.write_bytes(ckpt.read_bytes() + b"\0")
    manifest["files"][manifest["records"][0]["checkpoint"]["path"]] = _sha(ckpt)
    (swapped / "manifest.json").write_text(json.dumps(manifest))
    assert main(["accept", str(swapped), "--results", str(tmp_path / "results")]) == 2
    assert re.search(r"checkpoint .*final\.pt has sha256 .* in its entry", capsys.readouterr().err)
    assert not (tmp_path / "results").exists()


def test_accept_usage_errors_are_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["accept", str(tmp_path / "nope"), "--results", str(tmp_path / "r")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["accept", str(tmp_path / "empty"), "--results", str(tmp_path / "r")]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_a_bundle_built_with_no_reevaluate_says_so(run_root: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "quick.tar.gz"
    assert (
        main(["submit", str(run_root), "--track", TRACK, "--no-reevaluate", "--out", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    assert "not re-evaluated (--no-reevaluate)" in printed
    assert re.search(rf"bundle written to .*: {out.stat().st_size:,} bytes on disk", printed), (
        printed
    )
    import tarfile

    with tarfile.open(out) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    assert (
        manifest["reevaluation"]["by_submitter"] is False
        and "NOT re-evaluated" in manifest["reevaluation"]["note"]
    )
    assert manifest["records"][0]["provenance"]["reevaluated"] is False
    # the maintainers can still re-evaluate it
    assert manifest["records"][0]["checkpoint"]["bytes"] > 0


def _row_badges(page: str) -> dict[str, set[str]]:
    """method → the trust badges of its rows on a track page."""
    out: dict[str, set[str]] = {}
    for row in re.findall(r"<tr class=\"[^\"]*\"[^>]*>(.*?)</tr>", page, flags=re.DOTALL):
        method = re.search(r'href="\.\./methods/[^"]+"[^>]*>([^<]+)</a>', row)
        if method:
            badges = set(
                re.findall(
                    r'<span class="badge (?:good reeval|self-reported)"[^>]*>([^<]+)</span>', row
                )
            )
            out.setdefault(method.group(1), set()).update(badges)
    return out


def test_the_site_shows_re_evaluated_and_reported_rows_with_a_legend(
    accepted: tuple[Path, int, str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from leaderboard.site import build_site

    results = tmp_path / "results"
    shutil.copytree(accepted[0], results)
    # a record of the runner that nobody re-evaluated (like results/records' own)
    runs = tmp_path / "runs"
    cached_run(smoke_cell("no_pretrain", tasks=["knn"]), runs, tmp_path_factory)
    assert len(collect(runs, results)[0]) == 1
    site = tmp_path / "site"
    build_site([results], site)
    page = (site / "tracks" / f"{TRACK}.html").read_text()
    assert _row_badges(page) == {"fedavg_simclr": {"re-evaluated"}, "no_pretrain": {"reported"}}
    assert (
        'href="../legend.html"' in page
    )  # the legend is one page of its own, linked from each track
    legend = (site / "legend.html").read_text()
    assert "re-evaluated</span></dt>" in legend and "reported</span></dt>" in legend
    assert f"±{tolerance_for('knn'):g} points" in legend and "results/records" in legend
    (cell_id,) = [p.name.split(".")[0] for p in find_acceptances([results])]
    cell_page = (site / "cells" / f"{cell_id}.html").read_text()
    assert "Re-evaluation" in cell_page and "re-evaluated</span>" in cell_page
    assert "reported, not re-measured" in cell_page  # traffic and budgets: the runner's (issue 44)
    entry = next((site / "entries").glob("*.html"), None)
    entries = [p.read_text() for p in (site / "entries").glob("*.html")]
    assert entry is not None and any("(reported, not re-measured)</td>" in e for e in entries)
    assert not all("not re-measured" in e for e in entries)  # the runner's own rows: measured
    data = json.loads((site / "data.json").read_text())
    rows = {
        r["method"]: r["reevaluated"] for t in data["tracks"] if t["id"] == TRACK for r in t["rows"]
    }
    assert rows == {"fedavg_simclr": True, "no_pretrain": False}


def test_an_edited_acceptance_marks_nothing(
    accepted: tuple[Path, int, str], tmp_path: Path
) -> None:
    """The mark is tamper-evident: an acceptance edited by hand (a reproduced value typed over) no
    longer verifies, and one re-sealed by a forger with a reproduced value outside the tolerance is
    refused all the same."""
    from benchmark.records.acceptance_files import acceptance_digest
    from leaderboard.build import build_model

    results = tmp_path / "results"
    shutil.copytree(accepted[0], results)
    (path,) = find_acceptances([results])
    raw = json.loads(path.read_text())
    raw["scores"][0]["reproduced"] += 10.0
    path.write_text(json.dumps(raw))
    model = build_model([results])
    assert model.acceptances == {} and not model.frame["reevaluated"].any()
    assert any(s.path == path and "acceptance digest mismatch" in s.reason for s in model.skipped)
    raw["digest"] = acceptance_digest(raw)
    path.write_text(json.dumps(raw))
    model = build_model([results])
    assert model.acceptances == {} and any(
        s.path == path and "is not within" in s.reason for s in model.skipped
    )


class _RunsCode:
    """What a crafted checkpoint could hold: unpickling it calls ``Path.touch`` (any callable would
    do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_accept_never_unpickles_code_from_a_bundle(bundle: Path, tmp_path: Path, capsys) -> None:
    import torch

    crafted = tmp_path / "crafted"
    shutil.copytree(bundle, crafted)
    manifest = _manifest(crafted)
    entry = manifest["records"][0]
    ckpt = crafted / entry["checkpoint"]["path"]
    payload = torch.load(ckpt, map_location="cpu", weights_only=True)
    marker = tmp_path / "code-ran"
    payload["extra"] = {"hook": _RunsCode(marker)}
    torch.save(payload, ckpt)
    entry["checkpoint"]["sha256"] = manifest["files"][entry["checkpoint"]["path"]] = _sha(ckpt)
    (crafted / "manifest.json").write_text(json.dumps(manifest))
    # refused before anything is re-run (issue 39: every check before re-evaluation is exit 2)
    assert main(["accept", str(crafted), "--results", str(tmp_path / "results")]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "refused, not unpickled" in err and len(err.strip().splitlines()) == 1
