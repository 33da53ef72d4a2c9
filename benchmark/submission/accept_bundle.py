"""``python -m benchmark accept BUNDLE --results DIR``: the maintainers' re-evaluation of a
submission bundle.

Before anything is re-run, the bundle and every record are checked, and the first problem is refused
in one line (``BundleError``/``UsageError``: exit 2, nothing written, the scratch folder removed),
cheapest first:

1. the archive within its limits (``benchmark.submission.bundle``: sizes, members, path depth), the
   manifest's shape, every manifest path inside the bundle and every file's sha256;
2. each record's schema (names that become paths, every field's type, the cell's shape, text
   sizes), digest, cell id and pre-training key, its track and protocol card (as ``submit`` checks
   them), a score to re-evaluate (a record without scores is refused: there is nothing to vouch
   for), a re-evaluation cost within the project's card files (epochs, steps, batch size), every
   component of its cell configurable within its bounds, and its method installed here with the
   plugin source the record names (a method that is not built in must name one);
3. the acceptance and record paths under DIR: inside it, no link planted there;
4. each record's encoder checkpoint (``_pretrain/<pretrain_key>/final.pt``, carried by the bundle):
   the sha256 the manifest states, loaded as tensors and plain values only
   (``torch.load(weights_only=True)``: a bundle is someone else's file, and a pickle could run
   code), no tensor a view larger than its storage, and every tensor its evaluation reads (server
   model and extra, kept client states) hashing to the record's ``final_state_digest``;
5. the encoder the record's cell builds from that checkpoint, sized on PyTorch's meta device before
   anything is allocated: the checkpoint's tensors fit the modules the cell's parameters build,
   those modules hold at most ``--max-encoder-mb``, and their architecture fingerprint is the
   record's (``benchmark.submission.bounds``);
6. the cell's partition, rebuilt, is the record's.

A plugin task's protocol card travels in the bundle (``cards/<card_id>.card.json``): it is read bounded,
checked against a closed schema and its digest, and must be exactly the card of the records'
plugin-task scores (``benchmark.submission.carried_cards``); accepted, it is kept as
``DIR/cards/<card_id>.card.json``, which the leaderboard shows unranked.

Then, for every record, the encoder is rebuilt from the checkpoint (the method's own ``encoder``
export) and the record's tasks are re-run with the record's own task configs (so the same protocol
cards), in a scratch folder, with the same stage functions as the runner; every value of every
score must be reproduced within the task's tolerance
(:data:`benchmark.records.acceptance_files.TOLERANCES`).

No plugin code runs in this process (issue 52 item 3): a plugin's provenance is read from its
installed files and metadata without importing it; its method's version, ``export_params`` and
config bounds and its task's card are what its code declared in the box (``retrain.declare``); its
method's encoder is exported in the box (``exported``), its tasks scored in the box
(``boxed_tasks``); and while accept runs the registry refuses to load any plugin component
(``benchmark.core.registry.plugin_code_refused``), so a path missed here is a refusal, not an import.
A plugin partitioner would run here (the partition is rebuilt here): refused unless ``--unboxed``.

All or nothing: when every record passes, the records are copied into ``DIR/records/v1/`` and each
gets an acceptance file ``DIR/acceptances/<cell_id>.accept.json`` (record digest, scores as reported
and as reproduced, tolerance, fssl-bench commit), which ``leaderboard build`` verifies before it
marks the row *re-evaluated* and shows the reproduced value. Otherwise exit 1 with one line per
failing score (reported vs reproduced) and nothing is written. The files are written together or
not at all: a signal or an error while they are written removes the ones already in place. Every
write is confined to ``DIR`` (docs/submitting.md)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmark.core.canonical import file_sha256
from benchmark.core.errors import UsageError
from benchmark.records.acceptance_files import (
    ScoreCheck,
    acceptance_path,
    acceptance_text,
    make_acceptance,
    read_acceptance,
)
from benchmark.records.names import UnsafeName, confined
from benchmark.records.schema import ResultRecord
from benchmark.records.store import results_path
from benchmark.submission.bundle import (
    DEFAULT_LIMITS,
    BundleError,
    BundleLimits,
    bundle_problems,
    inside,
    opened_bundle,
    read_manifest,
)
from benchmark.submission.carried_cards import (
    CarriedCardError,
    card_problems,
    card_targets,
    read_bundle_cards,
)
from benchmark.submission.plugin_sources import PluginSource, read_sources
from benchmark.submission.reevaluation import reevaluate

# re-evaluation itself lives in benchmark.submission.reevaluation (submit uses it too; this module
# uses submit's checks)


# ------------------------------------------------------------------------------------------------
# the report


@dataclass
class RecordAcceptance:
    entry: Mapping[str, Any]
    record: ResultRecord | None = None
    problems: list[str] = field(default_factory=list)
    checks: list[ScoreCheck] = field(default_factory=list)
    training: Mapping[str, Any] | None = None  # the box it ran in, its re-training (acceptance)
    traffic: Mapping[str, Any] | None = None  # derived from the method's declaration, or not
    eval_time_s: float | None = None  # the re-evaluation's

    @property
    def label(self) -> str:
        return (
            self.record.cell_id if self.record is not None else str(self.entry.get("cell_id", "?"))
        )

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
    notes: list[str] = field(default_factory=list)  # plugins' non-code files, for a reviewer

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
        lines = [head, *(f"  {note}" for note in self.notes)]
        for r in self.records:
            lines += [f"  ok    {r.label}  {c.line()}" for c in r.checks if c.ok]
        lines += [f"  {line}" for line in self.failures()]
        if self.ok:
            lines.append(
                f"accepted: {len(self.records)} record(s) and their acceptance files written under "
                f"{self.results}"
            )
        else:
            lines.append("rejected: nothing written")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# accept


def accept(
    bundle: Path | str,
    results: Path | str,
    *,
    data_root: str | None = None,
    track: str | None = None,
    limits: BundleLimits = DEFAULT_LIMITS,
    unboxed: bool = False,
    tracks: Path | str | None = None,
) -> AcceptReport:
    """Re-evaluate every record of ``bundle`` (re-train it in the box first, on a track that
    re-trains: ``benchmark.submission.retrain``); when all pass, copy them into ``results`` with
    acceptance files. Anything refused before re-evaluation raises ``UsageError`` (one line)."""
    results = Path(results)
    if results.exists() and not results.is_dir():
        raise UsageError(f"--results {results} is a file, not a folder")
    report = AcceptReport(Path(bundle), results)
    from benchmark.contracts.cell import declared_export_params
    from benchmark.core.registry import plugin_code_refused

    with opened_bundle(Path(bundle), limits) as root, ExitStack() as stack:
        manifest = read_manifest(root, limits)
        problems = bundle_problems(root, manifest)
        if problems:
            raise BundleError(_one_line(f"{bundle}: ", problems))
        spec = _track_of(manifest, track, tracks)
        hidden = [Path(bundle), root, results, data_root]  # out of the box's sight
        # before any plugin import; no plugin code runs in this process from here on (issue 52):
        # what this process needs to know of a plugin method, its own code said in the box
        boxed, in_parent = _boxed(bundle, root, manifest, spec, hidden, unboxed)
        stack.enter_context(
            declared_export_params({m: d.export_params for m, d in boxed[0].items()})
        )
        stack.enter_context(plugin_code_refused(in_parent))  # a path missed here: one line
        sources = PluginSources(Path(bundle), read_sources(manifest))
        carried = _carried_cards(bundle, root, manifest)
        records = [
            _admit(root, i, entry, spec, sources, carried, boxed[0])
            for i, entry in enumerate(manifest["records"])
        ]
        report.notes = _plugin_notes(records)
        _refuse_across_records(bundle, results, records, carried)
        targets = [_targets(bundle, results, record) for _, record in records]
        try:
            card_files = card_targets(results, carried)
        except CarriedCardError as exc:
            raise BundleError(f"{bundle}: {exc}; nothing re-run, nothing written") from None
        from benchmark.submission.oracle import PartitionOracle

        oracle = PartitionOracle(data_root=data_root)
        traffic = [  # every record, before any is re-run
            _check_before_reevaluation(
                root,
                i,
                entry,
                record,
                oracle,
                data_root,
                limits,
                exported=record.method in boxed[0],
            )
            for i, (entry, record) in enumerate(records)
        ]
        encoders = _exported(bundle, root, records, boxed, data_root, hidden, limits)
        trained = _retrained(bundle, records, spec, boxed, data_root, hidden)
        for i, (entry, record) in enumerate(records):
            again, wrong = trained.get(record.cell_id, (None, []))
            if wrong:  # not this cell's training: nothing to re-evaluate
                report.records.append(RecordAcceptance(entry, record, list(wrong)))
                continue
            encoder = encoders.get(record.cell_id)
            box = _TaskBox(boxed[0].get(record.method), hidden, boxed[1] is not None)
            report.records.append(_accept_one(root, i, entry, record, data_root, encoder, box))
            done = report.records[-1]
            done.traffic = traffic[i]
            done.training = _training(again, boxed, record, done.eval_time_s, in_parent)
        if report.ok:
            manifest_sha = file_sha256(root / "manifest.json")
            report.written = _write(report, targets, manifest_sha, card_files)
    return report


def _refuse_across_records(
    bundle: Path | str,
    results: Path,
    records: list[tuple[Mapping[str, Any], ResultRecord]],
    carried: Mapping[str, Any],
) -> None:
    """What no single record shows: a cell listed twice, a checkpoint shared between records or
    already in the ledger for another pre-training, a carried card no record's task builds."""
    ids = [r.cell_id for _, r in records]
    if len(set(ids)) != len(ids):
        raise BundleError(f"{bundle}: a cell id is listed twice")
    shared = shared_checkpoints(records) + _ledger_problems(bundle, results, records)
    if shared:
        raise BundleError(_one_line(f"{bundle}: ", shared))
    mismatched = card_problems(carried, [r for _, r in records])
    if mismatched:
        raise BundleError(_one_line(f"{bundle}: ", mismatched))


def _carried_cards(bundle: Path | str, root: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The plugin-task cards the bundle carries (benchmark.submission.carried_cards), one line."""
    try:
        return read_bundle_cards(root, manifest)
    except CarriedCardError as exc:
        raise BundleError(f"{bundle}: {exc}; nothing re-run, nothing written") from None


def shared_checkpoints(records: list[tuple[Mapping[str, Any], ResultRecord]]) -> list[str]:
    """One checkpoint posing as several trainings (issue 44): records whose checkpoint file (its
    sha256) or final state (``final_state_digest``) is the same while their cells differ in more
    than their tasks and partition (another seed, learning rate, number of rounds...). Re-evaluation
    proves a checkpoint gives the scores, not that it was trained as its cell says; the same
    checkpoint under two trainings is a claim that cannot be true. A method that ignores the
    partition (central training, random init) shares one checkpoint across partitions, allowed."""
    from benchmark.submission.checkpoint_ledger import training_of

    seen: dict[tuple[str, str], tuple[str, str]] = {}
    out = []
    for entry, record in records:
        training = training_of(record)  # the pre-training key, partition left out
        ckpt = entry.get("checkpoint") if isinstance(entry.get("checkpoint"), Mapping) else {}
        for what, digest in (
            ("checkpoint", str(ckpt.get("sha256") or "")),
            ("final state", record.final_state_digest),
        ):
            if not digest:
                continue
            first = seen.setdefault((what, digest), (training, record.cell_id))
            if first[0] != training:
                out.append(
                    f"records {first[1]} and {record.cell_id} share one {what} "
                    f"({digest[:12]}…) but claim different trainings (seed, method, backbone or "
                    "federation): one training run cannot be two"
                )
    return out


def _ledger_problems(
    bundle: Path | str, results: Path, records: list[tuple[Mapping[str, Any], ResultRecord]]
) -> list[str]:
    """The same checkpoint across bundles and across time (issue 52): the results folder's ledger
    (``benchmark.submission.checkpoint_ledger``) must not hold the record's checkpoint or final state for
    another training; its entries are plain files under DIR, no link on the way."""
    from benchmark.submission.checkpoint_ledger import ledger_files, ledger_problems

    try:
        for path, _ in ledger_files(results, records, ""):
            _no_links(results, path)
    except UnsafeName as exc:
        raise BundleError(f"{bundle}: {exc}") from None
    return ledger_problems(results, records)


def _one_line(prefix: str, problems: list[str]) -> str:
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    return f"{prefix}{problems[0]}{more}; nothing re-run, nothing written"


def _boxed(
    bundle: Path | str,
    root: Path,
    manifest: Mapping[str, Any],
    spec: Any,
    hidden: list[Any],
    unboxed: bool,
) -> tuple[tuple[dict[str, Any], str | None], list[str]]:
    """The bundle's methods imported in the box (``retrain.boxed_imports``), one line on refusal;
    a record that does not read is left to its own check. Also the plugin code only this process
    could run (:func:`parent_plugin_code`): refused in one line unless ``unboxed``, else returned
    (the acceptance badges it)."""
    from benchmark.records.files import read_record
    from benchmark.submission.box import BoxRefused
    from benchmark.submission.retrain import boxed_imports

    records = []
    for entry in manifest["records"]:
        path = inside(root, entry["path"])
        try:
            records += [read_record(path)] if path is not None else []
        except Exception:  # noqa: BLE001, S112 - refused with its reason by _admit
            continue
    in_parent = sorted({name for r in records for name in parent_plugin_code(r)})
    if in_parent and not unboxed:
        raise BundleError(
            f"{bundle}: its records need plugin code that accept would run in its own process "
            f"({', '.join(in_parent)}): a plugin partitioner is not run in the box (the "
            "partition is rebuilt here, docs/integrity.md); pass --unboxed only if you trust "
            "that code (the rows accepted so are badged unboxed); nothing re-run, nothing written"
        )
    try:
        boxed = boxed_imports(records, reproduce=spec.reproduce, hidden=hidden, unboxed=unboxed)
    except BoxRefused as exc:
        raise BundleError(f"{bundle}: {exc}; nothing re-run, nothing written") from None
    return boxed, in_parent


def parent_plugin_code(record: ResultRecord) -> list[str]:
    """The record's plugin components ("partitioner:NAME") whose code ``accept`` could only run in
    its own process: a plugin partitioner (the partition is rebuilt here, and the plugin tasks'
    and the re-training's clients are its output). Read from the entry points' metadata, nothing
    imported. A plugin method or task is not among them: their code runs only in the box."""
    from benchmark.contracts.registries import PARTITIONERS, load_builtins
    from benchmark.core.registry import BUILT_IN

    load_builtins()
    name = (record.cell.get("partition") or {}).get("name")
    if isinstance(name, str) and PARTITIONERS.origin(name) not in (BUILT_IN, None):
        return [f"{PARTITIONERS.kind}:{name}"]
    return []


def _exported(
    bundle: Path | str,
    root: Path,
    records: list[tuple[Mapping[str, Any], ResultRecord]],
    boxed: tuple[dict[str, Any], str | None],
    data_root: str | None,
    hidden: list[Any],
    limits: BundleLimits,
) -> dict[str, Any]:
    """The encoders of the records whose methods were imported in the box, exported there by their
    methods' own code and rebuilt here from trusted classes (``benchmark.submission.exported``):
    cell id → Encoder. Evaluation then runs here, on the exported encoder only: no code of the
    method runs in this process. The first problem is refused in one line (exit 2)."""
    from benchmark.submission.box import BoxRefused
    from benchmark.submission.exported import export_in_box

    out: dict[str, Any] = {}
    todo = [(i, e, r) for i, (e, r) in enumerate(records) if r.method in boxed[0]]
    for batch in _batches(root, todo):
        items = [(r, pre) for _, _, r, pre in batch]
        try:
            done = export_in_box(
                items,
                data_root=data_root,
                max_bytes=limits.max_encoder_bytes,
                hidden=hidden,
                unboxed=boxed[1] is not None,
            )
        except BoxRefused as exc:
            raise BundleError(f"{bundle}: {exc}; nothing re-run, nothing written") from None
        for i, entry, record, _ in batch:
            got = done[record.cell_id]
            if isinstance(got, list):
                raise BundleError(_one_line(f"records[{i}] {entry['path']}: ", got))
            out[record.cell_id] = got
    return out


# the checkpoints one boxed export is handed together (a batch holds at least one)
EXPORT_BATCH_BYTES = 1 << 30


def _batches(root: Path, todo: list[tuple[int, Mapping[str, Any], ResultRecord]]) -> Any:
    """``todo``'s records with their checkpoints (checked again as they are loaded), in batches of
    one dataset and at most :data:`EXPORT_BATCH_BYTES` of checkpoint."""
    from benchmark.submission.bounds import checkpoint_tensors

    batch: list[tuple[int, Mapping[str, Any], ResultRecord, Any]] = []
    size = 0
    for i, entry, record in todo:
        problems: list[str] = []
        pre = _checkpoint(root, entry, record, problems)
        if pre is None:  # it passed a moment ago: the bundle changed under accept
            raise BundleError(_one_line(f"records[{i}] {entry['path']}: ", problems))
        n = sum(t.numel() * t.element_size() for _, _, t in checkpoint_tensors(pre))
        dataset = record.cell.get("dataset")
        if batch and (size + n > EXPORT_BATCH_BYTES or batch[0][2].cell.get("dataset") != dataset):
            yield batch
            batch, size = [], 0
        batch.append((i, entry, record, pre))
        size += n
    if batch:
        yield batch


def _retrained(
    bundle: Path | str,
    records: list[tuple[Mapping[str, Any], ResultRecord]],
    spec: Any,
    boxed: tuple[dict[str, Any], str | None],
    data_root: str | None,
    hidden: list[Any],
) -> dict[str, Any]:
    """On a track that re-trains (``reproduce``), every record's pre-training re-run in the box:
    cell id → (the re-run, the lines where the record disagrees with it)."""
    if not spec.reproduce:
        return {}
    from benchmark.submission.retrain import retrain_cells

    try:
        return retrain_cells(
            [r for _, r in records],
            boxed[0],
            kernels=spec.kernels,
            data_root=data_root,
            hidden=hidden,
            unboxed=boxed[1] is not None,
        )
    except ValueError as exc:
        raise BundleError(f"{bundle}: {exc}; nothing re-run, nothing written") from None


def _distributions(record: ResultRecord) -> list[str]:
    plugins = record.env.plugins.values()
    return sorted({str(p["distribution"]) for p in plugins if p.get("distribution")})


def _plugin_notes(records: list[tuple[Mapping[str, Any], ResultRecord]]) -> list[str]:
    """What the box cannot hide, shown: every plugin's non-code files with their sizes, and the
    ones over the review size (``benchmark.submission.plugin_files``)."""
    from benchmark.submission.plugin_files import plugin_file_lines

    listed, review = plugin_file_lines(d for _, r in records for d in _distributions(r))
    return listed + review


def _training(
    again: Any,
    boxed: tuple[dict[str, Any], str | None],
    record: ResultRecord,
    eval_time_s: float | None,
    in_parent: list[str] | None = None,
) -> Any:
    """What the acceptance file says of the record's training: the box it ran in (``none ...``,
    which the site badges unboxed, when a method ran without namespaces or the record's plugin
    task or partitioner ran in the accepting process under ``--unboxed``), and the re-run's numbers
    where it was re-trained (what the site shows)."""
    from benchmark.contracts.cell import Cell

    mine = [n for n in in_parent or [] if n in parent_plugin_code(record)]
    if not boxed[0] and not mine:
        return None
    from benchmark.submission.plugin_files import non_code_files

    box = "bubblewrap" if boxed[1] is None else "none (--unboxed)"
    if mine:
        box = f"none (--unboxed: {', '.join(mine)} ran in the accepting process)"
    out: dict[str, Any] = {"box": box}
    from benchmark.submission.boxed_tasks import plugin_tasks

    tasks = plugin_tasks(record)
    if tasks:  # their reproduced scores are the plugin's own code's, computed in the box
        out["plugin_tasks_scored_in_box"] = tasks
    files = {d: non_code_files(d) for d in _distributions(record)}
    if files:
        out["plugin_files"] = {d: [[rel, n] for rel, n in f] for d, f in files.items()}
    if again is not None:
        out["retrained"] = {
            **again.summary(Cell.from_dict(record.cell).fl.local_epochs),
            "eval_time_s": eval_time_s,
        }
    return out


def _track_of(manifest: Mapping[str, Any], track: str | None, tracks: Path | str | None) -> Any:
    from benchmark.submission.checks import SubmitError
    from benchmark.submission.submit_records import find_track

    track_id = track or manifest.get("track")
    if not track_id:
        raise BundleError(
            "the manifest names no track: pass --track ID (python -m benchmark list tracks)"
        )
    try:
        return find_track(track_id, Path(tracks) if tracks is not None else None)
    except SubmitError as exc:
        raise BundleError(str(exc)) from None


def _admit(
    root: Path,
    i: int,
    entry: Mapping[str, Any],
    spec: Any,
    sources: PluginSources,
    carried: Mapping[str, Any],
    declared: Mapping[str, Any] | None = None,
) -> tuple[Mapping[str, Any], ResultRecord]:
    """The record of manifest entry ``i`` when nothing about it is refused before re-evaluation
    (BundleError). ``declared``: what the methods imported in the box declared there (a plugin
    method's version and config bounds are read from it, its code not imported here)."""
    from benchmark.records.files import read_record
    from benchmark.records.schema import RecordError
    from benchmark.records.store import verify_record
    from benchmark.submission.bounds import config_problems
    from benchmark.submission.checks import (
        RecordCheck,
        check_identity,
        check_track,
        version_problems,
    )

    where = f"records[{i}] {entry['path']}"
    path = inside(root, entry["path"])
    if path is None:
        raise BundleError(f"{where}: not a file inside the bundle (refused, not read)")
    try:
        record = read_record(path)
    except RecordError as exc:
        raise BundleError(f"{where}: {exc}") from None
    problems = verify_record(record)
    if entry["cell_id"] != record.cell_id:
        problems.append(
            f"the manifest names cell {entry['cell_id']!r}, the record is {record.cell_id}"
        )
    if not record.scores:
        problems.append(
            f"the record has no scores (status {record.status}): nothing to "
            "re-evaluate, so accept cannot vouch for it"
        )
    if problems:
        raise BundleError(_one_line(f"{where}: ", problems))
    # first: the checks below look the method up in the registry
    plugins = plugin_problems(record, sources)
    if plugins:
        raise BundleError(_one_line(f"{where}: ", plugins))
    check = RecordCheck(path, record)
    check_identity(record, check)
    check_track(record, spec, check, declared or {})
    problems += [f"{name}: {why}" for name, why in check.problems]
    problems += version_problems(record, declared or {})
    problems += protocol_problems(record, carried, declared or {})
    # bounds of what the cell asks for, before it is built
    problems += config_problems(record, declared or {})
    if problems:
        raise BundleError(_one_line(f"{where}: ", problems))
    return entry, record


def _check_before_reevaluation(
    root: Path,
    i: int,
    entry: Mapping[str, Any],
    record: ResultRecord,
    oracle: Any,
    data_root: str | None,
    limits: BundleLimits,
    *,
    exported: bool = False,
) -> dict[str, Any]:
    """BundleError (one line, exit 2) at the first problem of manifest entry ``i`` found before its
    tasks are re-run, cheapest check first: the checkpoint (sha256, tensors only, no view larger
    than its storage, the final-state digest), the encoder the cell builds from it sized on the meta
    device (shapes, bytes, fingerprint: benchmark.submission.bounds), then the partition, then the
    traffic against the method's declaration on that partition (benchmark.submission.traffic).
    ``exported``: the method's encoder is exported in the box (``_exported``), which sizes it there
    and is checked here as it is rebuilt; its code is not called here. Returns the acceptance's
    ``traffic`` field."""
    from benchmark.submission.bounds import encoder_problems
    from benchmark.submission.checks import RecordCheck
    from benchmark.submission.traffic import checkpoint_problems

    problems: list[str] = []
    pre = _checkpoint(root, entry, record, problems)
    if pre is not None:
        problems += checkpoint_problems(record, pre)
        if not exported:
            problems += encoder_problems(record, pre, data_root, limits.max_encoder_bytes)
    if not problems:
        part = RecordCheck(Path(entry["path"]), record)
        oracle.check(record, part)
        problems += [f"{name}: {why}" for name, why in part.problems]
    if not problems and pre is not None:
        verdict = _traffic(record, pre, oracle, data_root)
        problems += verdict.problems
    del pre  # loaded again when its turn comes: a bundle's checkpoints are not all held at once
    if problems:
        raise BundleError(_one_line(f"records[{i}] {entry['path']}: ", problems))
    return verdict.acceptance()


def _traffic(record: ResultRecord, pre: Any, oracle: Any, data_root: str | None) -> Any:
    """The record's traffic against its method's declaration, on the partition just rebuilt."""
    from benchmark.contracts.registries import METHODS
    from benchmark.core.registry import BUILT_IN
    from benchmark.submission.traffic import (
        NOT_DECLARED,
        PLUGIN_DECLARED,
        TrafficVerdict,
        cell_method,
        checkpoint_problems,
        traffic_verdict,
    )

    if METHODS.origin(record.method) != BUILT_IN:
        # a plugin's declaration is its own code: not called here, and a figure it would confirm
        # is still the submitter's word (on a track that re-trains, the re-run's figure is shown)
        return TrafficVerdict(checkpoint_problems(record, pre), why=PLUGIN_DECLARED)
    sizes = oracle.client_sizes(record.cell)
    if sizes is None:  # not rebuilt here (a digest the leaderboard holds): nothing to sum over
        return TrafficVerdict(why=f"the partition was not rebuilt here; {NOT_DECLARED}")
    return traffic_verdict(record, pre, cell_method(record, data_root), *sizes)


@dataclass(frozen=True)
class _TaskBox:
    """Where a record's plugin tasks run (``benchmark.submission.boxed_tasks``): the declaration
    of its method made in the box (the cards its plugin tasks built there), what the box hides,
    and whether it runs without namespaces (``--unboxed``)."""

    declared: Any
    hidden: list[Any]
    unboxed: bool

    def scores(
        self, record: ResultRecord, pre: Any, data_root: str | None
    ) -> tuple[list[str], list[Any]]:
        """(the plugin tasks, their scores computed in the box); BoxRefused (one line)."""
        from benchmark.submission.box import BoxRefused
        from benchmark.submission.boxed_tasks import plugin_tasks, scores_in_box

        tasks = plugin_tasks(record)
        if not tasks:
            return [], []
        if self.declared is None:
            raise BoxRefused("its plugin tasks were not built in the box")
        cards: dict[str, set[str]] = {}
        for spec in record.cell.get("tasks") or []:
            if isinstance(spec, Mapping) and spec.get("name") in tasks:
                answer = self.declared.task(spec["name"], spec.get("params") or {})
                cards.setdefault(spec["name"], set()).update(
                    [answer["card_id"]] if "card_id" in answer else []
                )
        got = scores_in_box(
            record,
            pre,
            tasks,
            cards,
            data_root=data_root,
            hidden=self.hidden,
            unboxed=self.unboxed,
        )
        return tasks, got


def _accept_one(
    root: Path,
    i: int,
    entry: Mapping[str, Any],
    record: ResultRecord,
    data_root: str | None,
    encoder: Any = None,
    box: _TaskBox | None = None,
) -> RecordAcceptance:
    """Re-run the record's tasks from its checkpoint (checked again as it is loaded); ``encoder``:
    the encoder exported in the box (``_exported``), evaluated as it is; ``box``: where its plugin
    tasks run (never in this process)."""
    from benchmark.submission.box import BoxRefused

    out = RecordAcceptance(entry, record)
    problems: list[str] = []
    pre = _checkpoint(root, entry, record, problems)
    if pre is None:  # it passed a moment ago: the bundle changed under accept
        raise BundleError(_one_line(f"records[{i}] {entry['path']}: ", problems))
    t0 = time.perf_counter()
    try:
        elsewhere, scored = box.scores(record, pre, data_root) if box is not None else ([], [])
    except BoxRefused as exc:
        out.problems.append(f"re-evaluation failed: {exc}")
        return out
    try:
        out.checks, fingerprint = reevaluate(
            record, pre, data_root=data_root, encoder=encoder, elsewhere=elsewhere, scored=scored
        )
        out.eval_time_s = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - a checkpoint the tasks cannot run on is a rejection, not a crash
        out.problems.append(f"re-evaluation failed: {type(exc).__name__}: {exc}")
        return out
    if record.backbone_fingerprint and fingerprint != record.backbone_fingerprint:
        out.problems.append(
            f"the checkpoint's encoder has architecture fingerprint {fingerprint}, the record states "
            f"{record.backbone_fingerprint}"
        )
    return out


# The fields of a protocol card that set what a re-evaluation costs. A record's task may cost less
# than the project's card of the same name (a 1-epoch smoke probe), never more: re-evaluation runs
# within the protocol the maintainers published (tasks/cards/*.json), not whatever a record's own
# task configuration asks for.
COST_FIELDS = ("epochs", "steps", "max_iter", "max_images", "k", "warmup_epochs")


def protocol_problems(
    record: ResultRecord,
    carried: Mapping[str, Any] | None = None,
    declared: Mapping[str, Any] | None = None,
) -> list[str]:
    """Why re-running ``record``'s tasks could cost more than the project's cards allow ([] when it
    cannot). A plugin task (``env.plugins`` names it; :func:`plugin_problems` checked the installed
    copy is the one the record ran) whose card the bundle carries (``carried``: card_id → card) has
    no project card to be bounded by: the card its installed code builds must be the carried one.
    ``declared`` (``accept``): a plugin task's card is the one it built in the box (its code is
    not imported here; it runs in the box, bounded by the box's limits)."""
    from benchmark.contracts.registries import PUBLISHED_CARDS, TASKS, load_builtins
    from benchmark.core.config import from_mapping
    from benchmark.submission.bounds import batch_problems
    from benchmark.submission.checks import _declared_task

    load_builtins()
    load_card = PUBLISHED_CARDS.get("project")
    out = []
    for spec in record.cell.get("tasks") or []:
        try:
            boxed = _declared_task(record, TASKS, spec, declared)
        except ValueError as exc:
            out.append(f"task {spec.get('name')!r}: {exc}")
            continue
        if boxed is not None:
            if "error" in boxed:
                out.append(f"task {spec['name']!r} cannot be built here: {boxed['error']}")
            elif boxed["card_id"] not in (carried or {}):
                out.append(
                    f"task {spec['name']} (a plugin): the bundle does not carry its card "
                    f"{boxed['card_name']} ({boxed['card_id']}) that the installed task builds; "
                    f"it carries {sorted(carried or {}) or 'none'} (submit writes "
                    "cards/<card_id>.card.json)"
                )
            continue
        try:
            cls = TASKS.get(spec["name"])
            card = cls(from_mapping(cls.Config, dict(spec.get("params") or {}))).card()
        except Exception as exc:  # noqa: BLE001 - a task this installation cannot build is refused
            name = spec.get("name") if isinstance(spec, Mapping) else spec
            out.append(f"task {name!r} cannot be built here: {type(exc).__name__}: {exc}")
            continue
        if f"task:{spec['name']}" in record.env.plugins:  # a plugin's card travels in the bundle
            if card.card_id not in (carried or {}):
                out.append(
                    f"task {spec['name']} (a plugin): the bundle does not carry its card "
                    f"{card.name} ({card.card_id}) that the installed task builds; it carries "
                    f"{sorted(carried or {}) or 'none'} (submit writes cards/<card_id>.card.json)"
                )
            continue
        try:
            published = load_card(card.name).settings
        except (ValueError, KeyError, OSError) as exc:  # tasks.cards.CardError is a ValueError
            out.append(
                f"task {spec['name']}: card {card.name!r} is not one of the project's cards ({exc})"
            )
            continue
        for key in COST_FIELDS:
            mine, limit = card.settings.get(key), published.get(key)
            if _number(mine) and _number(limit) and mine > limit:
                out.append(
                    f"task {spec['name']}: {key} {mine} exceeds the card {card.name}'s "
                    f"{limit} (the track's protocol bounds a re-evaluation)"
                )
        out += batch_problems(spec["name"], card.name, card.settings, published)
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class PluginSources:
    """The bundle and the plugin sources its manifest names (``plugin_sources``), for the lines that
    say what to install."""

    bundle: Path
    by_distribution: Mapping[str, PluginSource] = field(default_factory=dict)

    def how(self, prov: Mapping[str, Any], *, force: bool = False) -> str:
        """How to install the plugin a record ran: the bundle's source for it, else the version
        from PyPI (which exists only if its author published it)."""
        from benchmark.submission.plugin_sources import normalize, quoted, recorded_source

        dist, version = prov.get("distribution"), prov.get("version")
        source = self.by_distribution.get(normalize(str(dist))) or recorded_source(prov)
        if source is not None:
            return f"{source.install(self.bundle, force=force)} (the source the bundle names)"
        pip = "pip install --force-reinstall --no-deps" if force else "pip install"
        return (
            f"{pip} {quoted(f'{dist}=={version}')} (from PyPI: only if its author published that "
            "version; the bundle names no wheel or VCS URL for it, so ask the submitter for one: "
            "submit --plugin-source)"
        )


def plugin_problems(record: ResultRecord, sources: PluginSources | None = None) -> list[str]:
    """The record's method (and plugin tasks) must be installed here, from the plugin source the
    record names; each refusal says what to install, from where."""
    from benchmark.contracts.registries import METHODS, TASKS, load_builtins

    load_builtins()
    sources = sources or PluginSources(Path("BUNDLE"))
    out = []
    claimed = dict(record.env.plugins)
    names = [("method", METHODS, record.method)]
    names += [
        ("task", TASKS, t.get("name"))
        for t in record.cell.get("tasks") or []
        if isinstance(t, Mapping)
    ]
    for kind, registry, name in names:
        problem = _plugin_problem(kind, registry, name, claimed.get(f"{kind}:{name}"), sources)
        if problem:
            out.append(problem)
    return out


def _plugin_problem(
    kind: str, registry: Any, name: str, prov: Mapping[str, Any] | None, sources: PluginSources
) -> str | None:
    from benchmark.core.provenance import component_provenance, installed_provenance
    from benchmark.core.registry import RegistryError

    if name not in registry:  # the built-ins and the entry points' metadata: nothing imported
        if prov and prov.get("distribution"):
            return (
                f"{kind} {name!r} is not installed here: install the plugin the record ran, "
                f"{prov['distribution']} {prov.get('version')}: {sources.how(prov)}; then accept again"
            )
        return f"{kind} {name!r} is not installed here: the record names no plugin distribution that provides it"
    clash = registry.clash(name)
    if clash:  # a name two installed distributions register
        return clash
    try:
        if registry.entry_target(name) is None:  # built in: this repository's code
            installed = component_provenance(registry.get(name))
        else:  # from the installed files and metadata, without importing the plugin (issue 52)
            installed = installed_provenance(registry, name)
    except ImportError as exc:
        return f"{kind} {name!r}: its entry point names code that is not installed here: {exc}"
    except RegistryError as exc:
        return str(exc)
    if prov is None:
        if installed is None:
            return None
        # not built in: the record must say which code it ran
        return (
            f"{kind} {name!r} is not built in (here it comes from "
            f"{installed.get('distribution') or installed['module']}) and the record "
            f"carries no provenance for it (env.plugins['{kind}:{name}']): a plugin's "
            "record must name the distribution and source digest it ran"
        )
    theirs = f"{str(prov.get('source_digest'))[:12]}…"
    if installed is None:
        return (
            f"{kind} {name!r} is built in here, but the record ran it from the plugin "
            f"{prov.get('distribution')} {prov.get('version')} (source digest {theirs}): not the "
            "code the record ran"
        )
    if installed.get("source_digest") == prov.get("source_digest"):
        return None
    same = installed.get("version") == prov.get("version")
    return (
        f"{kind} {name!r}: the installed copy of {installed.get('distribution')} "
        f"{installed.get('version')} has other sources than the record ran (source digest "
        f"{str(installed.get('source_digest'))[:12]}… here, {theirs} in the record"
        f"{'; same version, so an edited or rebuilt copy' if same else ''}): replace it with "
        f"{prov.get('distribution')} {prov.get('version')}: {sources.how(prov, force=same)}"
    )


def _checkpoint(
    root: Path, entry: Mapping[str, Any], record: ResultRecord, problems: list[str]
) -> Any:
    """The record's pre-trained state from the bundle, after its sha256 and final-state digest were
    checked."""
    from benchmark.engine.pretrained import Pretrained

    ckpt = entry.get("checkpoint")
    if not isinstance(ckpt, Mapping) or not ckpt.get("path"):
        problems.append(
            "checkpoint: the bundle carries no encoder checkpoint for this record, so its scores "
            "cannot be re-evaluated (submit it from its run root, where _pretrain/ holds it)"
        )
        return None
    path = inside(root, ckpt["path"])
    if path is None:
        problems.append(f"checkpoint: {ckpt['path']} is not in the bundle")
        return None
    actual = file_sha256(path)
    if actual != ckpt.get("sha256"):
        problems.append(
            f"checkpoint: {ckpt['path']} has sha256 {actual[:12]}…, the manifest states "
            f"{str(ckpt.get('sha256'))[:12]}…"
        )
        return None
    try:
        # tensors and plain values only: a bundle cannot run code here
        pre = Pretrained.load(path, untrusted=True)
    except Exception as exc:  # noqa: BLE001 - an unloadable checkpoint is a rejection
        problems.append(
            f"checkpoint: {ckpt['path']} does not load as tensors and plain values (refused, not "
            f"unpickled): {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        )
        return None
    from benchmark.submission.bounds import oversized_tensor

    oversized = oversized_tensor(pre)
    if oversized is not None:  # before hashing: hashing a stride-0 view would materialise it
        problems.append(
            f"checkpoint: {ckpt['path']} holds {oversized}, a view larger than its storage (not a "
            "tensor the runner saves; refused before it is read)"
        )
        return None
    try:
        bound = pre.state_digest() == record.final_state_digest
    except TypeError as exc:  # a value that is not a tensor: not a checkpoint this project wrote
        problems.append(f"checkpoint: {ckpt['path']} holds a value that is not a tensor: {exc}")
        return None
    if not bound:
        problems.append(
            f"checkpoint: {ckpt['path']} is not the record's final state (the tensors its "
            "evaluation reads, server model and extra and kept client states, do not hash to "
            "final_state_digest)"
        )
        return None
    return pre


@dataclass(frozen=True)
class Targets:
    """Where one accepted record goes under --results, checked before anything is re-run."""

    record: Path  # results/records/v1/<method>/<cell_id>.json
    acceptance: Path  # results/acceptances/<cell_id>.accept.json
    write_record: bool  # False: the same record is there already
    write_acceptance: bool  # False: an acceptance of this very record is there already


def _targets(bundle: Path | str, results: Path, record: ResultRecord) -> Targets:
    """The record's two target paths, refused in one line (before any work) when one would leave
    --results (a name, or a link planted on the way) or is taken by something else: a different
    record, an acceptance of another record, a damaged one, or anything that is not a file."""
    from benchmark.records.schema import to_json
    from benchmark.records.store import RESULTS_SUBDIR

    try:  # the second guard, before any work: every target stays in results, no link on the way
        _no_links(results, results / RESULTS_SUBDIR / record.method / f"{record.cell_id}.json")
        _no_links(results, acceptance_path(results, record.cell_id))
        target = results_path(results, record)
        acc = confined(results, acceptance_path(results, record.cell_id))
    except UnsafeName as exc:
        raise BundleError(f"{bundle}: {exc}") from None
    same = target.exists() and target.read_text(encoding="utf-8") == to_json(record)
    if target.exists() and not same:
        raise UsageError(
            f"{target} exists with different content (records are immutable); nothing re-run, "
            "nothing written"
        )
    keep = False
    if acc.exists():
        try:
            keep = read_acceptance(acc).get("record_digest") == record.digest
        except ValueError:
            keep = False
        if not keep:
            raise UsageError(
                f"{acc} exists for another record or is damaged; remove it by hand first; "
                "nothing re-run, nothing written"
            )
    return Targets(target, acc, not same, not keep)


def _no_links(results: Path, path: Path) -> None:
    """UnsafeName when something between ``results`` and ``path`` (itself included) is a link (a
    planted link would redirect a write), or ``path`` exists and is not a file."""
    here = Path(results)
    for part in Path(path).relative_to(results).parts:
        here = here / part
        if here.is_symlink():
            raise UnsafeName(
                f"{here} is a link: accept writes only plain files under --results (remove it "
                "by hand); nothing re-run, nothing written"
            )
    if path.exists() and not path.is_file():
        raise UnsafeName(f"{path} exists and is not a file; nothing re-run, nothing written")


def _write(
    report: AcceptReport, targets: list[Targets], manifest_sha: str, card_files: list[Path]
) -> list[Path]:
    """Copy the records and write their acceptance files, all of them or none
    (``write_new_files``: a signal or an error while writing removes what was already in
    place)."""
    from benchmark.records.env_info import collect_env
    from benchmark.records.files import RecordExists, write_new_files
    from benchmark.records.schema import to_json

    env = collect_env()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    files: list[tuple[Path, str]] = []
    for r, t in zip(report.records, targets):
        assert r.record is not None
        if t.write_record:
            files.append((t.record, to_json(r.record)))
        if t.write_acceptance:
            ckpt = r.entry.get("checkpoint")
            acc = make_acceptance(
                r.record,
                r.checks,
                checkpoint={k: ckpt.get(k) for k in ("sha256", "bytes")}
                if isinstance(ckpt, Mapping)
                else None,
                git_sha=env.git_sha,
                git_dirty=env.git_dirty,
                accepted_at=now,
                bundle_sha256=manifest_sha,
                training=r.training,
                traffic=r.traffic,
            )
            files.append((t.acceptance, acceptance_text(acc)))
    from benchmark.records.carried_card_format import card_text, plugin_cards

    cards = plugin_cards(r.record for r in report.records if r.record is not None)
    files += [(path, card_text(cards[path.name.split(".")[0]])) for path in card_files]
    from benchmark.submission.checkpoint_ledger import ledger_files, ledger_problems

    accepted = [(r.entry, r.record) for r in report.records if r.record is not None]
    # checked again as the files are written: an accept that ran meanwhile may have entered one of
    # these checkpoints for another training (a new entry both write is refused by write_new_files)
    late = ledger_problems(report.results, accepted)
    if late:
        raise UsageError(_one_line(f"{report.results}: since this bundle was checked, ", late))
    files += ledger_files(report.results, accepted, now)
    try:
        return write_new_files(files)
    except RecordExists as exc:  # another accept wrote the same file since the targets were checked
        raise UsageError(
            f"{exc} (another accept into {report.results} won the race; accept again to see "
            "whether it is the same record)"
        ) from None


__all__ = [
    "COST_FIELDS",
    "AcceptReport",
    "RecordAcceptance",
    "accept",
    "opened_bundle",
    "parent_plugin_code",
    "plugin_problems",
    "protocol_problems",
    "reevaluate",
]
