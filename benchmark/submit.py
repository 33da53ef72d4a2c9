"""``python -m benchmark submit RECORDS... --track ID --out BUNDLE``: validate records before they reach the leaderboard.

Every record is checked; a submission is all or nothing (one rejected record → exit 1, no bundle). Checks, each
reported with a named reason:

``schema``        the file parses strictly and its ``schema_version`` is the current one (older files: ``collect``
                  migrates them first)
``identity``      ``cell_id`` and ``pretrain_key`` equal the digests of the record's own ``cell``; the redundant
                  fields (method, method_version, dataset, seed) agree with the cell
``integrity``     the scores are the ones the runner wrote. Scores are deliberately not part of the cell id, so an
                  edited score leaves the id intact. The runner writes each task's scores to
                  ``scores/<task>-<card_id>.json`` as the task finishes, and ``partition.json``, before it writes
                  ``record.json``; submit requires these sidecars next to every record that claims
                  ``env.runner == "fssl-bench"`` and compares them field by field; the final checkpoint
                  (``_pretrain/<pretrain_key>/final.pt``) must hash to the record's ``final_state_digest``. By
                  default submit then *re-evaluates*: it rebuilds the encoder from that checkpoint and re-runs the
                  record's tasks (``benchmark.reevaluation.reevaluate``), which must reproduce every value within the
                  task's tolerance (``benchmark.records.acceptance.TOLERANCES``); ``--no-reevaluate`` skips that,
                  and the bundle's manifest then says the scores were not re-evaluated by the submitter. The
                  sidecars catch accidental and naive edits; a deliberate forgery of record and sidecars together is
                  caught only by re-evaluation, which the maintainers repeat on the bundle (``python -m benchmark
                  accept``) before a row is marked re-evaluated on the site. Records from other runners carry no
                  sidecars: they are accepted as *unverified* and the bundle manifest says so (the leaderboard shows
                  them marked).
``partition``     the record's ``partition_digest`` equals the official partition of its cell, recomputed from the
                  cell's partition spec, partition seed and client count on the dataset (digits is embedded; other
                  datasets must be available locally), and equals the digest that records already on the
                  leaderboard (``--against``) and ``results/manifests/*.json`` hold for the same partition spec
``track``         the record belongs to the track (dataset, federation settings, backbone), has a score for the
                  track's task, and that score's protocol card is the track's (card name, pinned card_id) and the
                  card the registered task builds today from the cell's task config (so a card cannot be edited)
``seeds``         every (method, configuration) group of the submission has at least the track's ``min_seeds``
                  distinct seeds

The bundle (a folder, or ``.tar.gz``) is laid out as a run root: ``records/<method>/<cell_id>/record.json`` with
its sidecars, and the encoder checkpoint each record's tasks need, ``records/_pretrain/<pretrain_key>/final.pt``
(once per pre-training; cells that differ only in their tasks share it). ``manifest.json`` lists every file's sha256,
every record's provenance (runner, git sha, dirty flag, verified, re-evaluated) and checkpoint (path, size in bytes,
sha256), whether the submitter re-evaluated and with which tolerances, and the bundle's total size.
:func:`verify_bundle` re-checks the hashes on receipt.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark.grid import pretrain_key_for
from benchmark.records.canonical import to_plain
from benchmark.records.identity import cell_id_of
from benchmark.records.schema import SCHEMA_VERSION, RecordError, ResultRecord, TaskScores, from_json
from benchmark.records.store import iter_record_files
from benchmark.records.tracks import Track, TrackError, load_tracks
from benchmark.records.tracks import find_track as find_track_in
from benchmark.rundir import RunDir

BUNDLE_VERSION = 1
BUNDLE_RECORDS = "records"  # the bundle's run root: records/<method>/<cell_id>/ as in a run root
VERIFIED_RUNNER = "fssl-bench"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_MANIFESTS = REPO / "results" / "manifests"


class SubmitError(ValueError):
    """Bad input to submit (unknown track, unreadable tracks file, nothing to submit)."""


# ------------------------------------------------------------------------------------------------ tracks


DEFAULT_TRACKS = REPO / "leaderboard" / "tracks.yaml"  # data; the Track type is benchmark.records.tracks


def find_track(track_id: str, path: Path | None = None) -> Track:
    try:
        return find_track_in(load_tracks(Path(path) if path is not None else DEFAULT_TRACKS), track_id)
    except TrackError as exc:
        raise SubmitError(f"{exc}" + (" (pass --tracks FILE)" if "does not exist" in str(exc) else "")) from None


# ------------------------------------------------------------------------------------------------ the report


@dataclass
class RecordCheck:
    path: Path
    record: ResultRecord | None
    problems: list[tuple[str, str]] = field(default_factory=list)  # (check name, reason)
    sealed: bool = False  # the runner's sidecars were present and matched
    reevaluated: bool = False  # the submitter's re-run reproduced every score within tolerance
    checkpoint: Path | None = None  # the encoder checkpoint the record's tasks need (its run root's final.pt)
    score_checks: list[Any] = field(default_factory=list)  # benchmark.records.acceptance.ScoreCheck

    @property
    def ok(self) -> bool:
        return not self.problems

    def fail(self, check: str, reason: str) -> None:
        self.problems.append((check, reason))

    @property
    def verified(self) -> bool:
        return self.ok and self.record is not None and self.record.env.runner == VERIFIED_RUNNER and self.sealed


@dataclass
class SubmitReport:
    track: Track | None
    checks: list[RecordCheck]
    group_problems: list[tuple[str, str]] = field(default_factory=list)
    bundle: Path | None = None
    reevaluate: bool = True  # whether the submitter re-ran the tasks (``--no-reevaluate``: False)
    bundle_bytes: int = 0  # the bundle on disk (a .tar.gz: compressed)
    unpacked_bytes: int = 0  # its files, checkpoints included, manifest excluded
    checkpoint_bytes: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks) and not self.group_problems

    def reasons(self) -> list[str]:
        """Every failure as ``check: reason`` (check names are stable; tests and scripts match on them)."""
        out = [f"{name}: {c.path}: {reason}" for c in self.checks for name, reason in c.problems]
        return out + [f"{name}: {reason}" for name, reason in self.group_problems]

    def format(self) -> str:
        lines = []
        for c in self.checks:
            label = c.record.cell_id if c.record else c.path.name
            if c.ok:
                tag = "verified" if c.verified else "unverified (not from the fssl-bench runner, or unsealed)"
                tag += ", re-evaluated" if c.reevaluated else ", not re-evaluated"
                lines.append(f"  OK    {label}  {c.path}  [{tag}]")
            else:
                for name, reason in c.problems:
                    lines.append(f"  FAIL  {label}  {name}: {reason}")
        for name, reason in self.group_problems:
            lines.append(f"  FAIL  {name}: {reason}")
        n_bad = sum(not c.ok for c in self.checks)
        head = f"submit: {len(self.checks)} record(s), {n_bad} rejected" + (
            f", track {self.track.id}" if self.track else "")
        tail = "no bundle written"
        if self.bundle:
            tail = (f"bundle written to {self.bundle}: {self.bundle_bytes:,} bytes on disk; its files "
                    f"{self.unpacked_bytes:,} bytes, of which final pre-training states (the "
                    f"server state the encoder is rebuilt from) {self.checkpoint_bytes:,} bytes")
            if not self.reevaluate:
                tail += ("\nnot re-evaluated (--no-reevaluate): the manifest says so; the scores rest on the runner's "
                         "word until the maintainers' accept step re-runs them")
        return "\n".join([head, *lines, tail])


# ------------------------------------------------------------------------------------------------ checks


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _scores_plain(s: TaskScores) -> dict[str, Any]:
    return to_plain(s)


def schema_message(version: Any) -> str:
    """The one command that helps with a record of another schema version, or that none can."""
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        return (f"schema_version {version} was written by a newer fssl-bench (this one reads {SCHEMA_VERSION}): "
                "upgrade fssl-bench (pip install -U fssl-bench)")
    if isinstance(version, int) and not isinstance(version, bool) and 0 < version < SCHEMA_VERSION:
        return (f"schema_version {version} is older than {SCHEMA_VERSION}: re-run its cell with this version "
                "(records are sealed by the runner that wrote them; a migrated copy would not be)")
    return f"schema_version {version!r} is not a version any fssl-bench wrote: the file is not a record"


def check_schema(path: Path, check: RecordCheck) -> ResultRecord | None:
    try:
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        check.fail("schema", f"cannot read a JSON record: {exc}")
        return None
    version = raw.get("schema_version") if isinstance(raw, Mapping) else None
    if version != SCHEMA_VERSION:
        check.fail("schema", schema_message(version))
        return None
    try:
        return from_json(text)
    except RecordError as exc:
        check.fail("schema", str(exc))
        return None


def check_identity(record: ResultRecord, check: RecordCheck) -> None:
    cell = dict(record.cell)
    if cell_id_of(cell) != record.cell_id:
        check.fail("identity", f"cell_id {record.cell_id} does not match the cell's content ({cell_id_of(cell)})")
    if pretrain_key_for(cell) != record.pretrain_key:
        check.fail("identity", f"pretrain_key {record.pretrain_key} does not match the cell ({pretrain_key_for(cell)})")
    method = cell.get("method") or {}
    for label, have, want in (("method", record.method, method.get("name")),
                              ("method_version", record.method_version, method.get("version")),
                              ("dataset", record.dataset, (cell.get("dataset") or {}).get("name")),
                              ("seed", record.seed, cell.get("seed"))):
        if have != want:
            check.fail("identity", f"{label} {have!r} does not match the cell's {want!r}")


def check_integrity(path: Path, record: ResultRecord, check: RecordCheck, *, reevaluate: bool = True,
                    data_root: str | None = None) -> None:
    from benchmark.records.integrity import integrity_problems

    for problem in integrity_problems(record):  # the record's own digest, with or without sidecars
        check.fail("integrity", problem)
    rd = RunDir.from_record_file(path, record)
    if rd is None or not rd.score_files():
        if record.env.runner == VERIFIED_RUNNER:
            check.fail("integrity", "the record claims env.runner 'fssl-bench' but has no runner sidecars "
                                    "(submit the record in its run root, not a copy)")
        return
    _check_sidecars(rd, record, check)
    _check_final_state(rd, record, check, reevaluate, data_root)
    if check.ok:
        check.sealed = True


def _check_sidecars(rd: RunDir, record: ResultRecord, check: RecordCheck) -> None:
    """The record's scores and partition digest equal what the runner wrote beside it as each task finished."""
    sidecars: dict[tuple[str, str], dict[str, Any]] = {}
    for side in rd.score_files():
        try:
            raw = json.loads(side.read_text(encoding="utf-8"))
            sidecars[(raw["task"], TaskScores(**{**raw, "card": _card(raw["card"])}).card.card_id)] = raw
        except Exception as exc:  # noqa: BLE001 - an unreadable sidecar is an integrity failure
            check.fail("integrity", f"unreadable scores sidecar {side.name}: {exc}")
    for s in record.scores:
        side = sidecars.pop((s.task, s.card.card_id), None)
        side_name = rd.relative(rd.score_path(s.task, s.card.card_id))
        if side is None:
            check.fail("integrity", f"score {s.task}/{s.card.card_id} has no sidecar {side_name} (the card or the "
                                    "scores were edited)")
            continue
        mine = _scores_plain(s)
        for key in ("values", "main_metric", "higher_is_better", "card"):
            if mine.get(key) != side.get(key):
                check.fail("integrity", f"{s.task} {key} in the record {mine.get(key)!r} differ from the runner's "
                                        f"{side_name} {side.get(key)!r} (edited after it was written)")
    if record.status == "ok" and sidecars:
        check.fail("integrity", f"the runner wrote scores the record lacks: {sorted(k[0] for k in sidecars)}")
    if rd.partition_file.exists():
        try:
            pdig = rd.read_partition().get("digest")
        except json.JSONDecodeError:
            pdig = None
        if pdig != record.partition_digest:
            check.fail("integrity", f"partition_digest {record.partition_digest[:12]}… differs from the runner's "
                                    f"{rd.relative(rd.partition_file)} ({str(pdig)[:12]}…)")


def _check_final_state(rd: RunDir, record: ResultRecord, check: RecordCheck, reevaluate: bool,
                       data_root: str | None = None) -> None:
    """The saved pre-trained state hashes to the record's final-state digest (and travels in the bundle);
    ``reevaluate``: re-run the record's tasks from it."""
    final = rd.pretrain.final
    needs = record.status == "ok" and bool(record.scores)  # a diverged record has no scores to re-run
    if not final.exists():
        if reevaluate and needs:
            check.fail("integrity", f"re-evaluation needs the saved pre-trained state {rd.relative(final)} (pass "
                                    "--no-reevaluate to skip it: the bundle then says the scores were not "
                                    "re-evaluated and carries no checkpoint)")
        return
    if not record.final_state_digest or not needs:
        return
    from benchmark.pretrained import Pretrained
    from benchmark.simulate import state_digest

    try:  # tensors and plain values only: a run folder may be someone else's (docs/submitting.md)
        pre = Pretrained.load(final, untrusted=True)
    except Exception as exc:  # noqa: BLE001 - one that needs full unpickling is refused
        check.fail("integrity", f"{rd.relative(final)} does not load as tensors and plain values "
                                f"(refused, not unpickled): {type(exc).__name__}")
        return
    if state_digest(dict(pre.server.model)) != record.final_state_digest:
        check.fail("integrity", f"final_state_digest does not match the saved pre-trained state {rd.relative(final)}")
        return
    check.checkpoint = final
    if reevaluate:
        _reevaluate(record, pre, check, data_root)


def _card(raw: Mapping[str, Any]) -> Any:
    from benchmark.records.schema import ProtocolCard

    return ProtocolCard(**raw)


def _reevaluate(record: ResultRecord, pre: Any, check: RecordCheck, data_root: str | None) -> None:
    """Rebuild the encoder from the saved pre-trained state and re-run the record's tasks (the runner's stages, as
    ``accept`` does); every value must be reproduced within its task's tolerance."""
    from benchmark.reevaluation import reevaluate

    check.score_checks, _ = reevaluate(record, pre, data_root=data_root)
    for c in check.score_checks:
        if not c.ok:
            check.fail("integrity", f"re-evaluating from the final checkpoint: {c.line()}")
    check.reevaluated = all(c.ok for c in check.score_checks)


class PartitionOracle:
    """The official partition digest of a cell: recomputed on the dataset, cross-checked with known digests."""

    def __init__(self, known: Mapping[str, set[str]] | None = None, data_root: str | None = None) -> None:
        self._cache: dict[str, str | None] = {}
        self.known = {k: set(v) for k, v in (known or {}).items()}
        self.data_root = data_root

    @staticmethod
    def key(cell: Mapping[str, Any]) -> str:
        """What fixes a partition: dataset, partitioner, partition seed, client count and public split."""
        from benchmark.records.canonical import canonical_json

        body = {k: cell.get(k) for k in ("dataset", "partition", "partition_seed", "public")}
        body["num_clients"] = (cell.get("fl") or {}).get("num_clients")
        return _sha256(canonical_json(body).encode())[:16]

    def recompute(self, cell: Mapping[str, Any]) -> tuple[str | None, str]:
        key = self.key(cell)
        if key not in self._cache:
            from benchmark.config import from_mapping
            from benchmark.data.datasets import default_data_root
            from benchmark.grid import Cell
            from benchmark.registries import DATASETS, load_builtins
            from benchmark.stages import build_partition, load_data

            load_builtins()
            c = Cell.from_dict(cell)
            cfg = from_mapping(DATASETS.get(c.dataset.name), dict(c.dataset.params))
            root = Path(self.data_root) if self.data_root else default_data_root()
            if not cfg.available(root):
                self._cache[key] = None
            else:
                self._cache[key] = build_partition(c, load_data(c, self.data_root).train.labels).digest()
        return self._cache[key], key

    def check(self, record: ResultRecord, check: RecordCheck) -> None:
        try:
            official, key = self.recompute(record.cell)
        except Exception as exc:  # noqa: BLE001 - a cell whose partition cannot be rebuilt is rejected
            check.fail("partition", f"cannot rebuild the partition of the cell: {type(exc).__name__}: {exc}")
            return
        known = self.known.get(key, set())
        if official is None and not known:
            check.fail("partition", f"dataset {record.dataset!r} is not available locally and no manifest or "
                                    "leaderboard record holds this partition's digest (prefetch the dataset)")
            return
        if official is not None and record.partition_digest != official:
            check.fail("partition", f"partition_digest {record.partition_digest[:12]}… differs from the track's "
                                    f"official partition {official[:12]}… ({record.partition_label}, "
                                    f"partition_seed {record.cell.get('partition_seed')})")
        if known and record.partition_digest not in known:
            check.fail("partition", f"partition_digest {record.partition_digest[:12]}… differs from the digest "
                                    f"the leaderboard holds for {record.partition_label} "
                                    f"({min(known)[:12]}…)")


def known_partition_digests(against: Sequence[Path], manifests: Path | None) -> dict[str, set[str]]:
    """Partition digests by partition key, from records already on the leaderboard and from grid manifests.

    A manifest (``results/manifests/<grid>.json``) may carry ``{"partitions": [{"cell": {...}, "digest": ...}]}``
    or cells with a ``partition_digest``; anything else in it is ignored."""
    from benchmark.records.store import load_records

    known: dict[str, set[str]] = defaultdict(set)
    if against:
        records, _ = load_records([Path(p) for p in against])
        for _, r in records:
            known[PartitionOracle.key(r.cell)].add(r.partition_digest)
    if manifests is not None and Path(manifests).is_dir():
        for path in sorted(Path(manifests).glob("*.json")):
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            items = raw.get("partitions") or raw.get("cells") or [] if isinstance(raw, Mapping) else []
            for item in items if isinstance(items, list) else []:
                if isinstance(item, Mapping) and isinstance(item.get("cell"), Mapping):
                    dig = item.get("digest") or item.get("partition_digest")
                    if isinstance(dig, str):
                        known[PartitionOracle.key(item["cell"])].add(dig)
    return dict(known)


def check_track(record: ResultRecord, track: Track, check: RecordCheck) -> None:
    why = track.admits(record)  # the site build's membership rule, the same function
    if why:
        check.fail("track", why)
        return
    if record.status != "ok":
        return  # a diverged record has no scores; it is shown as diverged, not dropped
    scores = [s for s in record.scores if s.task == track.task]
    expected = _current_cards(record)
    for s in scores:
        if track.card is not None and s.card.name != track.card:
            check.fail("track", f"{s.task} card {s.card.name!r} is not the track's {track.card!r}")
        if track.card_id is not None and s.card.card_id != track.card_id:
            check.fail("track", f"{s.task} card_id {s.card.card_id} is not the track's {track.card_id}")
        if s.card.selects_on_test:
            check.fail("track", f"{s.task} card selects on the test set ({s.card.selection})")
        if expected is not None and s.card.card_id not in expected.get(s.task, set()):
            check.fail("track", f"{s.task} card_id {s.card.card_id} is not the card the registered task builds "
                                f"from the cell's config ({sorted(expected.get(s.task, set()))})")


def _current_cards(record: ResultRecord) -> dict[str, set[str]] | None:
    """task name → card ids the registered tasks build today from the cell's task configs (None: unavailable)."""
    try:
        from benchmark.config import from_mapping
        from benchmark.registries import TASKS, load_builtins

        load_builtins()
        out: dict[str, set[str]] = defaultdict(set)
        for spec in record.cell.get("tasks") or []:
            cls = TASKS.get(spec["name"])
            out[spec["name"]].add(cls(from_mapping(cls.Config, dict(spec.get("params") or {}))).card().card_id)
        return dict(out)
    except Exception:  # noqa: BLE001 - without the task code the card cannot be rebuilt; other checks still run
        return None


def check_seeds(records: Iterable[ResultRecord], track: Track) -> list[tuple[str, str]]:
    """Every configuration (the cell without its seed) must come with ``track.min_seeds`` distinct seeds."""
    from benchmark.records.canonical import canonical_json

    groups: dict[str, set[int]] = defaultdict(set)
    labels: dict[str, str] = {}
    for r in records:
        body = {k: v for k, v in dict(r.cell).items() if k != "seed"}
        key = _sha256(canonical_json(body).encode())[:16]
        groups[key].add(int(r.seed))
        labels[key] = f"{r.method} | {r.partition_label}"
    return [("seeds", f"{labels[k]}: {len(s)} seed(s) {sorted(s)}, the track requires {track.min_seeds}")
            for k, s in sorted(groups.items()) if len(s) < track.min_seeds]


# ------------------------------------------------------------------------------------------------ submit


def expand_paths(paths: Sequence[Path | str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise SubmitError(f"{p} does not exist")
        out.extend(iter_record_files(p) if p.is_dir() else [p])
    seen, unique = set(), []
    for p in out:
        if p.resolve() not in seen:
            seen.add(p.resolve())
            unique.append(p)
    if not unique:
        raise SubmitError("no record files found")
    return unique


def submit(
    paths: Sequence[Path | str],
    *,
    track: str | None,
    out: Path | str | None = None,
    tracks_file: Path | None = None,
    against: Sequence[Path | str] = (),
    manifests: Path | None = DEFAULT_MANIFESTS,
    reevaluate: bool = True,
    data_root: str | None = None,
) -> SubmitReport:
    """Validate ``paths`` (record files or folders of them) for ``track``; write the bundle to ``out`` if all pass.
    ``reevaluate`` (the default) re-runs every record's tasks from its final checkpoint; False skips it and the
    bundle's manifest says so."""
    files = expand_paths(paths)
    spec = find_track(track, tracks_file) if track else None
    oracle = PartitionOracle(known_partition_digests([Path(a) for a in against], manifests), data_root)
    checks: list[RecordCheck] = []
    for path in files:
        check = RecordCheck(path, None)
        checks.append(check)
        record = check_schema(path, check)
        if record is None:
            continue
        check.record = record
        check_identity(record, check)
        check_integrity(path, record, check, reevaluate=reevaluate, data_root=data_root)
        oracle.check(record, check)
        if spec is not None:
            check_track(record, spec, check)
    report = SubmitReport(spec, checks, reevaluate=reevaluate)
    cell_ids = [c.record.cell_id for c in checks if c.record is not None]
    dupes = sorted({i for i in cell_ids if cell_ids.count(i) > 1})
    if dupes:
        report.group_problems.append(("identity", f"cell id(s) submitted twice: {dupes}"))
    if spec is not None:
        report.group_problems.extend(check_seeds([c.record for c in checks if c.record is not None], spec))
    if report.ok and out is not None:
        report.bundle = write_bundle(report, Path(out))
    return report


def _bundle_files(check: RecordCheck) -> list[tuple[Path, str]]:
    """(source file, path inside the bundle) for one record: the record and the runner's sidecars."""
    assert check.record is not None
    r = check.record
    inside = RunDir(Path(BUNDLE_RECORDS), r.method, r.cell_id, r.pretrain_key)  # a bundle is laid out as a run root
    files = [(check.path, str(inside.record_path))]
    rd = RunDir.from_record_file(check.path, r)
    if rd is not None:
        files += [(side, str(inside.cell_dir / side.relative_to(rd.cell_dir))) for side in rd.sidecar_files()]
    return files


def _bundle_checkpoint(check: RecordCheck) -> tuple[Path, str] | None:
    """(source, path inside the bundle) of the encoder checkpoint the record's tasks need, when it has one."""
    if check.checkpoint is None or check.record is None:
        return None
    r = check.record
    inside = RunDir(Path(BUNDLE_RECORDS), r.method, r.cell_id, r.pretrain_key)
    return check.checkpoint, str(inside.pretrain.final)


def _manifest_reevaluation(report: SubmitReport) -> dict[str, Any]:
    from benchmark.records.acceptance import tolerance_for

    tasks = sorted({s.task for c in report.checks if c.record is not None for s in c.record.scores})
    return {
        "by_submitter": report.reevaluate,
        "note": ("the submitter re-ran every task of every record from its checkpoint (submit's default); the "
                 "maintainers repeat it with python -m benchmark accept" if report.reevaluate else
                 "NOT re-evaluated by the submitter (submit --no-reevaluate): the scores are the runner's own "
                 "until the maintainers' python -m benchmark accept re-runs them"),
        "tolerance": {t: tolerance_for(t) for t in tasks},
        "tolerance_rule": "absolute, per value, in the value's unit (percentage points for classification tasks)",
    }


def write_bundle(report: SubmitReport, out: Path) -> Path:
    """Write the records, their sidecars, the encoder checkpoints their tasks need and ``manifest.json`` (sha256 of
    every file, provenance and checkpoint of every record, whether the submitter re-evaluated, the total size)."""
    from benchmark.records.env import collect_env
    from benchmark.reevaluation import file_sha256

    tarball = out.name.endswith((".tar.gz", ".tgz"))
    if out.exists():
        raise SubmitError(f"{out} exists; bundles are never overwritten")
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "bundle"
        files: dict[str, str] = {}
        sizes: dict[str, int] = {}
        entries = []
        for c in report.checks:
            assert c.record is not None
            bundled = _bundle_files(c)
            for src, rel in bundled:
                data = src.read_bytes()
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                (stage / rel).write_bytes(data)
                files[rel], sizes[rel] = _sha256(data), len(data)
            checkpoint = None
            ckpt = _bundle_checkpoint(c)
            if ckpt is not None:
                src, rel = ckpt
                if rel not in files:  # cells that differ only in their tasks share one pre-training
                    (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, stage / rel)
                    files[rel], sizes[rel] = file_sha256(stage / rel), (stage / rel).stat().st_size
                checkpoint = {"path": rel, "bytes": sizes[rel], "sha256": files[rel]}
            r = c.record
            entries.append({
                "cell_id": r.cell_id, "method": r.method, "method_version": r.method_version, "seed": r.seed,
                "dataset": r.dataset, "partition_label": r.partition_label, "partition_digest": r.partition_digest,
                "path": bundled[0][1], "sha256": files[bundled[0][1]], "checkpoint": checkpoint,
                "provenance": {"runner": r.env.runner, "git_sha": r.env.git_sha, "git_dirty": r.env.git_dirty,
                               "sealed": c.sealed, "reevaluated": c.reevaluated, "verified": c.verified},
            })
        env = collect_env()
        ckpt_paths = {e["checkpoint"]["path"] for e in entries if e["checkpoint"]}
        manifest = {
            "bundle_version": BUNDLE_VERSION, "schema_version": SCHEMA_VERSION,
            "track": report.track.id if report.track else None,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "submitted_with": {"tool": "python -m benchmark submit", "git_sha": env.git_sha,
                               "git_dirty": env.git_dirty},
            "reevaluation": _manifest_reevaluation(report),
            "size": {"files_bytes": sum(sizes.values()), "checkpoint_bytes": sum(sizes[p] for p in ckpt_paths),
                     "checkpoints": len(ckpt_paths)},
            "records": entries, "files": dict(sorted(files.items())),
        }
        (stage / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        out.parent.mkdir(parents=True, exist_ok=True)
        if tarball:
            tmp_out = out.with_name(f".{out.name}.tmp")
            with tarfile.open(tmp_out, "w:gz") as tar:
                for path in sorted(stage.rglob("*")):
                    if path.is_file():
                        tar.add(path, arcname=str(path.relative_to(stage)))
            tmp_out.replace(out)
            report.bundle_bytes = out.stat().st_size
        else:
            shutil.copytree(stage, out)
            report.bundle_bytes = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        report.checkpoint_bytes = manifest["size"]["checkpoint_bytes"]
        report.unpacked_bytes = manifest["size"]["files_bytes"]
    return out


def verify_bundle(bundle: Path, limits: Any = None) -> list[str]:
    """Problems with a bundle as received: a refused archive or manifest, paths that leave the
    bundle, missing or extra files, sha256 mismatches, unreadable records (``benchmark.bundle``:
    bounded, confined before reading)."""
    from benchmark.bundle import (
        DEFAULT_LIMITS,
        BundleError,
        bundle_problems,
        inside,
        opened_bundle,
        read_manifest,
    )
    from benchmark.records.files import read_record

    try:
        with opened_bundle(Path(bundle), limits or DEFAULT_LIMITS) as root:
            manifest = read_manifest(root, limits or DEFAULT_LIMITS)
            problems = bundle_problems(root, manifest)
            if problems:
                return problems
            for entry in manifest["records"]:
                path = inside(root, entry["path"])
                try:
                    r = read_record(path) if path is not None else None
                except RecordError as exc:
                    problems.append(f"record {entry['path']}: {exc}")
                    continue
                if r is None or cell_id_of(dict(r.cell)) != r.cell_id:
                    problems.append(f"record {entry['path']}: cell_id does not match its cell")
            return problems
    except BundleError as exc:
        return [str(exc)]


__all__ = ["SubmitError", "SubmitReport", "Track", "find_track", "submit", "verify_bundle",
           "write_bundle"]
