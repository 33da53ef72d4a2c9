"""``python -m benchmark accept BUNDLE --results DIR``: the maintainers' re-evaluation of a submission bundle.

For every record of the bundle (``benchmark.submit`` writes it):

1. the bundle's files match the sha256s of its manifest; the record's own digest matches its content and its cell id
   its cell; the cell's partition, rebuilt, is the record's;
2. the record's encoder checkpoint (``_pretrain/<pretrain_key>/final.pt``, carried by the bundle) matches the sha256
   the manifest states, loads as tensors and plain values only (``torch.load(weights_only=True)``: a bundle is
   someone else's file, and a pickle could run code), and its server tensors hash to the record's
   ``final_state_digest``;
3. the encoder is rebuilt from it (the method's own ``encoder`` export), with the architecture fingerprint the record
   states, and the record's tasks are re-run with the record's own task configs (so the same protocol cards), in a
   scratch folder, with the same stage functions as the runner;
4. every value of every score must be reproduced within the task's tolerance
   (:data:`benchmark.records.acceptance.TOLERANCES`).

All or nothing: when every record passes, the records are copied into ``DIR/records/v1/`` and each gets an
acceptance file ``DIR/acceptances/<cell_id>.accept.json`` (record digest, scores as reported and as reproduced,
tolerance, fssl-bench commit), which ``leaderboard build`` verifies before it marks the row *re-evaluated*. Otherwise
exit 1 with one line per failing check or score (reported vs reproduced) and nothing is written.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark.errors import UsageError
from benchmark.records.acceptance import (
    ScoreCheck,
    acceptance_path,
    acceptance_text,
    make_acceptance,
    read_acceptance,
)
from benchmark.records.schema import ResultRecord
from benchmark.reevaluation import file_sha256, reevaluate


# re-evaluation itself lives in benchmark.reevaluation (submit uses it too; this module uses submit's checks)


# ------------------------------------------------------------------------------------------------ the report


@dataclass
class RecordAcceptance:
    entry: Mapping[str, Any]
    record: ResultRecord | None = None
    problems: list[str] = field(default_factory=list)
    checks: list[ScoreCheck] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.record.cell_id if self.record is not None else str(self.entry.get("cell_id", "?"))

    @property
    def ok(self) -> bool:
        return not self.problems and all(c.ok for c in self.checks)


@dataclass
class AcceptReport:
    bundle: Path
    results: Path
    bundle_problems: list[str] = field(default_factory=list)
    records: list[RecordAcceptance] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.bundle_problems and bool(self.records) and all(r.ok for r in self.records)

    def failures(self) -> list[str]:
        """One line per failing check, and per failing score: reported vs reproduced."""
        out = [f"FAIL  bundle: {p}" for p in self.bundle_problems]
        for r in self.records:
            out += [f"FAIL  {r.label}  {p}" for p in r.problems]
            out += [f"FAIL  {r.label}  {c.line()}" for c in r.checks if not c.ok]
        return out

    def format(self) -> str:
        n_scores = sum(len(r.checks) for r in self.records)
        head = f"accept: {self.bundle}: {len(self.records)} record(s), {n_scores} value(s) re-evaluated"
        lines = [head]
        for r in self.records:
            lines += [f"  ok    {r.label}  {c.line()}" for c in r.checks if c.ok]
        lines += [f"  {line}" for line in self.failures()]
        if self.ok:
            lines.append(f"accepted: {len(self.records)} record(s) and their acceptance files written under "
                         f"{self.results}")
        else:
            lines.append("rejected: nothing written")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ accept


@contextmanager
def opened_bundle(bundle: Path) -> Iterator[Path]:
    """The bundle's root folder (a ``.tar.gz`` is extracted to a temporary folder). Bad input: UsageError."""
    bundle = Path(bundle)
    if not bundle.exists():
        raise UsageError(f"bundle {bundle} does not exist")
    if bundle.is_dir():
        root = bundle
        if not (root / "manifest.json").is_file():
            raise UsageError(f"{bundle} is not a submission bundle (no manifest.json): make one with "
                             "python -m benchmark submit")
        yield root
        return
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with tarfile.open(bundle, "r:*") as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise UsageError(f"{bundle} is not a submission bundle (a folder or a .tar.gz): {exc}") from None
        if not (Path(tmp) / "manifest.json").is_file():
            raise UsageError(f"{bundle} is not a submission bundle (no manifest.json)")
        yield Path(tmp)


def accept(bundle: Path | str, results: Path | str, *, data_root: str | None = None) -> AcceptReport:
    """Re-evaluate every record of ``bundle``; when all pass, copy them into ``results`` with acceptance files."""
    results = Path(results)
    if results.exists() and not results.is_dir():
        raise UsageError(f"--results {results} is a file, not a folder")
    report = AcceptReport(Path(bundle), results)
    with opened_bundle(Path(bundle)) as root:
        try:
            manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UsageError(f"{bundle}: manifest.json unreadable: {exc}") from None
        from benchmark.submit import verify_bundle

        report.bundle_problems += verify_bundle(root)
        entries = manifest.get("records") if isinstance(manifest, Mapping) else None
        if not isinstance(entries, list) or not entries:
            report.bundle_problems.append("the manifest lists no records")
            return report
        from benchmark.submit import PartitionOracle

        oracle = PartitionOracle(data_root=data_root)
        for entry in entries:
            report.records.append(_accept_one(root, entry if isinstance(entry, Mapping) else {}, oracle, data_root))
        if report.ok:
            manifest_sha = file_sha256(root / "manifest.json")
            report.written = _write(report, results, manifest_sha)
    return report


def _accept_one(root: Path, entry: Mapping[str, Any], oracle: Any, data_root: str | None) -> RecordAcceptance:
    from benchmark.records.files import read_record
    from benchmark.records.schema import RecordError
    from benchmark.records.store import verify_record

    out = RecordAcceptance(entry)
    rel = entry.get("path")
    path = _inside(root, rel)
    if path is None:
        out.problems.append(f"record path {rel!r} points outside the bundle")
        return out
    try:
        record = read_record(path)
    except (RecordError, TypeError) as exc:
        out.problems.append(f"record {rel}: {exc}")
        return out
    out.record = record
    out.problems += [f"integrity: {p}" for p in verify_record(record)]
    if entry.get("cell_id") != record.cell_id:
        out.problems.append(f"the manifest names cell {entry.get('cell_id')!r}, the record is {record.cell_id}")
    from benchmark.submit import RecordCheck

    part = RecordCheck(path, record)
    oracle.check(record, part)
    out.problems += [f"{name}: {why}" for name, why in part.problems]
    if out.problems or not record.scores:
        return out  # nothing to re-run for a diverged record (no scores); a broken record is not re-run
    pre = _checkpoint(root, entry, record, out)
    if pre is None:
        return out
    try:
        out.checks, fingerprint = reevaluate(record, pre, data_root=data_root)
    except Exception as exc:  # noqa: BLE001 - a checkpoint the tasks cannot run on is a rejection, not a crash
        out.problems.append(f"re-evaluation failed: {type(exc).__name__}: {exc}")
        return out
    if record.backbone_fingerprint and fingerprint != record.backbone_fingerprint:
        out.problems.append(f"the checkpoint's encoder has architecture fingerprint {fingerprint}, the record states "
                            f"{record.backbone_fingerprint}")
    return out


def _inside(root: Path, rel: Any) -> Path | None:
    """``root / rel`` when it stays inside the bundle (a manifest names files; it must not reach beyond it)."""
    if not isinstance(rel, str) or not rel:
        return None
    path = (root / rel).resolve()
    return path if path.is_relative_to(root.resolve()) else None


def _checkpoint(root: Path, entry: Mapping[str, Any], record: ResultRecord, out: RecordAcceptance) -> Any:
    """The record's pre-trained state from the bundle, after its sha256 and final-state digest were checked."""
    from benchmark.pretrained import Pretrained
    from benchmark.simulate import state_digest

    ckpt = entry.get("checkpoint")
    if not isinstance(ckpt, Mapping) or not ckpt.get("path"):
        out.problems.append("checkpoint: the bundle carries no encoder checkpoint for this record, so its scores "
                            "cannot be re-evaluated (submit it from its run root, where _pretrain/ holds it)")
        return None
    path = _inside(root, ckpt["path"])
    if path is None or not path.is_file():
        out.problems.append(f"checkpoint: {ckpt['path']} is not in the bundle")
        return None
    actual = file_sha256(path)
    if actual != ckpt.get("sha256"):
        out.problems.append(f"checkpoint: {ckpt['path']} has sha256 {actual[:12]}…, the manifest states "
                            f"{str(ckpt.get('sha256'))[:12]}…")
        return None
    try:
        pre = Pretrained.load(path, untrusted=True)  # tensors and plain values only: a bundle cannot run code here
    except Exception as exc:  # noqa: BLE001 - an unloadable checkpoint is a rejection
        out.problems.append(f"checkpoint: {ckpt['path']} does not load as tensors and plain values (refused, not "
                            f"unpickled): {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return None
    if state_digest(dict(pre.server.model)) != record.final_state_digest:
        out.problems.append(f"checkpoint: {ckpt['path']} is not the record's final state (its tensors do not hash "
                            "to final_state_digest)")
        return None
    return pre


def _write(report: AcceptReport, results: Path, manifest_sha: str) -> list[Path]:
    """Copy the records and write their acceptance files; a conflict with results/ is a failure, nothing written."""
    from benchmark.records.env import collect_env
    from benchmark.records.files import atomic_write_text
    from benchmark.records.schema import to_json
    from benchmark.records.store import results_path

    plans = []
    for r in report.records:
        assert r.record is not None
        target = results_path(results, r.record)
        if target.exists() and target.read_text(encoding="utf-8") != to_json(r.record):
            r.problems.append(f"{target} exists with different content (records are immutable)")
        acc_path = acceptance_path(results, r.record.cell_id)
        keep = False
        if acc_path.exists():
            try:
                keep = read_acceptance(acc_path).get("record_digest") == r.record.digest
            except ValueError:
                keep = False
            if not keep:
                r.problems.append(f"{acc_path} exists for another record or is damaged; remove it by hand first")
        plans.append((r, target, acc_path, keep))
    if not report.ok:
        return []
    env = collect_env()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    written = []
    for r, target, acc_path, keep in plans:
        assert r.record is not None
        if not target.exists():
            atomic_write_text(target, to_json(r.record))
            written.append(target)
        if not keep:
            ckpt = r.entry.get("checkpoint")
            acc = make_acceptance(r.record, r.checks,
                                  checkpoint={k: ckpt.get(k) for k in ("sha256", "bytes")} if isinstance(
                                      ckpt, Mapping) else None,
                                  git_sha=env.git_sha, git_dirty=env.git_dirty, accepted_at=now,
                                  bundle_sha256=manifest_sha)
            atomic_write_text(acc_path, acceptance_text(acc))
            written.append(acc_path)
    return written


__all__ = ["AcceptReport", "RecordAcceptance", "accept", "file_sha256", "opened_bundle", "reevaluate"]
