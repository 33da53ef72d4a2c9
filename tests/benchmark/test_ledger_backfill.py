"""The ledger backfilled (issue 52, item 2): ``accept`` writes a ledger entry for every checkpoint it
accepts, but the records a results folder held before the ledger existed (the shipped runs, earlier
acceptances) had none, so a shipped checkpoint could come back as another training.
``python -m benchmark ledger --backfill`` writes their entries (idempotent, the same bytes wherever
it runs); the repository's results/ledger/ is what it writes, complete; no record changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmark.cli import main
from benchmark.records.files import read_record
from benchmark.submission.checkpoint_ledger import LEDGER_SUBDIR, backfill, ledger_problems
from tests.hostile import reseal

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"


def _copy(tmp_path: Path, *, ledger: bool = False) -> Path:
    """A copy of the repository's records (and acceptances), without its ledger unless asked."""
    out = tmp_path / "results"
    shutil.copytree(RESULTS / "records", out / "records")
    if (RESULTS / "acceptances").is_dir():
        shutil.copytree(RESULTS / "acceptances", out / "acceptances")
    if ledger:
        shutil.copytree(RESULTS / LEDGER_SUBDIR, out / LEDGER_SUBDIR)
    return out


def _shipped(method: str = "fedavg_simclr"):
    path = sorted((RESULTS / "records" / "v1" / method).glob("*.json"))[0]
    return read_record(path)


def test_the_repository_ledger_is_what_backfill_writes_and_is_complete(tmp_path: Path) -> None:
    found = backfill(_copy(tmp_path))
    assert found.conflicts == [] and found.skipped == [] and found.held == 0
    written = {p.name: text for p, text in found.files}
    shipped = {p.name: p.read_text() for p in (RESULTS / LEDGER_SUBDIR).glob("*.json")}
    # one state entry per distinct final state of the shipped records (pixels has none: no tensors)
    states = {
        r.final_state_digest for r in map(read_record, (RESULTS / "records" / "v1").rglob("*.json"))
    }
    assert len(written) == len(states - {""}) >= 60
    assert written == shipped
    missing = [p.name for p, _ in backfill(RESULTS).files]
    assert missing == [], "results/ledger/ lacks entries: python -m benchmark ledger --backfill"


def test_backfill_is_idempotent_and_check_says_what_is_missing(tmp_path: Path, capsys) -> None:
    results = _copy(tmp_path)
    before = sorted((p, p.read_bytes()) for p in (results / "records").rglob("*.json"))
    assert main(["ledger", "--check", "--results", str(results)]) == 1
    assert "missing" in capsys.readouterr().out
    assert main(["ledger", "--backfill", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    n = len(list((results / LEDGER_SUBDIR).glob("*.json")))
    assert f"{n} entries written, 0 already held" in out and n >= 60
    assert main(["ledger", "--backfill", "--results", str(results)]) == 0
    assert f"0 entries written, {n} already held" in capsys.readouterr().out
    assert main(["ledger", "--check", "--results", str(results)]) == 0
    assert sorted((p, p.read_bytes()) for p in (results / "records").rglob("*.json")) == before


def test_a_shipped_checkpoint_cannot_come_back_as_another_training() -> None:
    """The repository's ledger holds every shipped final state: the same state claimed for the
    learning rate × 10 (or 500 rounds) is refused; the shipped training itself is not."""
    honest = _shipped()
    assert ledger_problems(RESULTS, [({}, honest)]) == []

    def lr_times_10(cell: dict) -> None:
        cell["method"]["params"]["lr"] *= 10

    def rounds_500(cell: dict) -> None:
        cell["fl"]["rounds"] = 500

    for edit in (lr_times_10, rounds_500):
        other = reseal(honest, edit_cell=edit)
        assert other.final_state_digest == honest.final_state_digest
        (line,) = ledger_problems(RESULTS, [({}, other)])
        assert "was accepted before for another training" in line and honest.cell_id in line


def test_an_acceptance_s_checkpoint_is_backfilled_and_a_claim_for_two_trainings_is_not(
    tmp_path: Path, capsys
) -> None:
    from benchmark.records.acceptance_files import (
        acceptance_path,
        acceptance_text,
        compare_scores,
        make_acceptance,
    )
    from benchmark.records.store import results_path, write_record

    results = tmp_path / "results"
    honest = _shipped()
    write_record(results_path(results, honest), honest)
    acc = make_acceptance(
        honest,
        compare_scores(honest.scores, honest.scores),
        checkpoint={"sha256": "ab" * 32, "bytes": 10},
        git_sha="abc",
        git_dirty=False,
        accepted_at="2026-12-01T00:00:00+00:00",
        bundle_sha256=None,
    )
    path = acceptance_path(results, honest.cell_id)
    path.parent.mkdir(parents=True)
    path.write_text(acceptance_text(acc))
    found = backfill(results)
    entries = {p.name.split("-")[0]: json.loads(text) for p, text in found.files}
    assert set(entries) == {"checkpoint", "state"}
    assert entries["checkpoint"]["digest"] == "ab" * 32
    assert entries["checkpoint"]["backfilled_from"] == "acceptance"
    assert entries["state"]["accepted_at"] == "2026-12-01T00:00:00+00:00"
    # a second record claiming the same final state for another training: a conflict, no entry
    other = reseal(honest, edit_cell=lambda c: c["fl"].update(rounds=500))
    write_record(results_path(results, other), other)
    assert main(["ledger", "--backfill", "--results", str(results)]) == 1
    out = capsys.readouterr().out
    assert "CONFLICT" in out and "claim it for different trainings" in out
    assert [p.name.split("-")[0] for p in (results / LEDGER_SUBDIR).iterdir()] == ["checkpoint"]


def test_a_folder_without_records_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["ledger", "--backfill", "--results", str(tmp_path)]) == 2
    assert "holds no records/ folder" in capsys.readouterr().err


def test_a_damaged_ledger_entry_is_a_conflict_not_overwritten(tmp_path: Path) -> None:
    results = _copy(tmp_path, ledger=True)
    honest = _shipped()
    path = results / LEDGER_SUBDIR / f"state-{honest.final_state_digest}.json"
    path.write_text("{not json")
    found = backfill(results)
    assert any(honest.final_state_digest[:12] in line for line in found.conflicts)
    assert path not in [p for p, _ in found.files]


def test_a_digest_that_is_not_sha256_names_no_entry(tmp_path: Path) -> None:
    """Only 64 lower-case hex digits name a ledger entry: a 300-character or non-ASCII "digest"
    from a hostile record is not looked up (a file name that long is an OSError, a traceback at
    accept), and the other checks refuse the record."""
    from dataclasses import replace

    from benchmark.submission.checkpoint_ledger import digests_of

    good = "ab" * 32
    record = replace(_shipped(), final_state_digest="a" * 300)
    assert digests_of({"checkpoint": {"sha256": "\u0663" * 64}}, record) == []
    assert [d for _, _, d in digests_of({"checkpoint": {"sha256": good}}, record)] == [good]
    (tmp_path / LEDGER_SUBDIR).mkdir()
    assert ledger_problems(tmp_path, [({"checkpoint": {"sha256": "f" * 300}}, record)]) == []
