"""``python -m benchmark submit RECORDS... --track ID --out BUNDLE``: validate records before they
reach the leaderboard.

Which records belong to the track is decided first, before any other check or re-evaluation
(``Track.admits``, the site's own rule): a record that is not on the track (another dataset,
federation, backbone, or without the track's task) is *left out* (listed, not bundled; ``--strict``
rejects it instead). Every record on the track is checked; among them a submission is all or nothing
(one rejected record → exit 1, no bundle).
Checks, each reported with a named reason:

``schema``        the file parses strictly and its ``schema_version`` is the current one (older
files: ``collect``
                  migrates them first)
``identity``      ``cell_id`` and ``pretrain_key`` equal the digests of the record's own ``cell``;
the redundant
                  fields (method, method_version, dataset, seed) agree with the cell
``integrity``     the scores are the ones the runner wrote. Scores are deliberately not part of the
cell id, so an
                  edited score leaves the id intact. The runner writes each task's scores to
                  ``scores/<task>-<card_id>.json`` as the task finishes, and ``partition.json``, before it writes
                  ``record.json``; submit requires these sidecars next to every record that claims
                  ``env.runner == "fssl-bench"`` and compares them field by field; the final checkpoint
                  (``_pretrain/<pretrain_key>/final.pt``) must hash to the record's ``final_state_digest``. By
                  default submit then *re-evaluates*: it rebuilds the encoder from that checkpoint and re-runs the
                  record's tasks (``benchmark.submission.reevaluation.reevaluate``), which must reproduce every value within the
                  task's tolerance (``benchmark.records.acceptance_files.TOLERANCES``); ``--no-reevaluate`` skips that,
                  and the bundle's manifest then says the scores were not re-evaluated by the submitter. The
                  sidecars catch accidental and naive edits; a deliberate forgery of record and sidecars together is
                  caught only by re-evaluation, which the maintainers repeat on the bundle (``python -m benchmark
                  accept``) before a row is marked re-evaluated on the site. Records from other runners carry no
                  sidecars: they are accepted as *unverified* and the bundle manifest says so (the leaderboard shows
                  them marked).
``partition``     the record's ``partition_digest`` equals the official partition of its cell,
recomputed from the
                  cell's partition spec, partition seed and client count on the dataset (digits is embedded; other
                  datasets must be available locally), and equals the digest that records already on the
                  leaderboard (``--against``) and ``results/manifests/*.json`` hold for the same partition spec
``track``         the record belongs to the track (dataset, federation settings, backbone), has a
score for the
                  track's task, and that score's protocol card is the track's (card name, pinned card_id) and the
                  card the registered task builds today from the cell's task config (so a card cannot be edited)
``seeds``         every (method, configuration) group of the submission has at least the track's
``min_seeds``
                  distinct seeds

The bundle (a folder, or ``.tar.gz``) is laid out as a run root:
``records/<method>/<cell_id>/record.json`` with its sidecars, and the encoder checkpoint each
record's tasks need, ``records/_pretrain/<pretrain_key>/final.pt`` (once per pre-training; cells
that differ only in their tasks share it). ``manifest.json`` lists every file's sha256, every
record's provenance (runner, git sha, dirty flag, verified, re-evaluated) and checkpoint (path, size
in bytes, sha256), whether the submitter re-evaluated and with which tolerances, and the bundle's
total size. :func:`verify_bundle` re-checks the hashes on receipt.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from benchmark.core.paths import RESULTS, TRACKS_FILE
from benchmark.records.store import iter_record_files
from benchmark.records.tracks import Track, TrackError, load_tracks
from benchmark.records.tracks import find_track as find_track_in
from benchmark.submission.bundle import write_bundle
from benchmark.submission.checks import (
    RecordCheck,
    SubmitError,
    SubmitReport,
    check_identity,
    check_integrity,
    check_schema,
    check_seeds,
    check_settings,
    check_track,
    grid_settings,
    sweep_notes,
)
from benchmark.submission.oracle import PartitionOracle, known_partition_digests

DEFAULT_MANIFESTS = RESULTS / "manifests"


# ------------------------------------------------------------------------------------------------
# tracks


# data; the Track type is benchmark.records.tracks
DEFAULT_TRACKS = TRACKS_FILE


def find_track(track_id: str, path: Path | None = None) -> Track:
    try:
        return find_track_in(
            load_tracks(Path(path) if path is not None else DEFAULT_TRACKS), track_id
        )
    except TrackError as exc:
        raise SubmitError(
            f"{exc}" + (" (pass --tracks FILE)" if "does not exist" in str(exc) else "")
        ) from None


# ------------------------------------------------------------------------------------------------
# the report


# ------------------------------------------------------------------------------------------------
# checks


# ------------------------------------------------------------------------------------------------
# submit


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
    plugin_sources: Sequence[str] = (),
    strict: bool = False,
) -> SubmitReport:
    """Validate ``paths`` (record files or folders of them) for ``track``; write the bundle to
    ``out`` if all pass. ``reevaluate`` (the default) re-runs every record's tasks from its final
    checkpoint; False skips it and the bundle's manifest says so. ``plugin_sources`` (wheel files,
    or ``NAME @ git+URL@COMMIT``) say where the maintainers get the records' plugins
    (``benchmark.submission.plugin_sources``). Which records are on the track is decided first
    (:meth:`Track.admits`, the site's rule): the others are listed in ``report.left_out`` and
    neither checked further nor bundled, or, with ``strict``, rejected (no bundle)."""
    files = expand_paths(paths)
    spec = find_track(track, tracks_file) if track else None
    oracle = PartitionOracle(
        known_partition_digests([Path(a) for a in against], manifests), data_root
    )
    settings = grid_settings(spec) if spec is not None else None
    checks: list[RecordCheck] = []
    left_out: list[tuple[Path, str, str]] = []
    for path in files:
        check = RecordCheck(path, None)
        record = check_schema(path, check)
        # membership first: a record that is not on the track is never re-evaluated
        why = spec.admits(record) if spec is not None and record is not None else None
        if why and not strict:
            left_out.append((path, record.cell_id, why))
            continue
        checks.append(check)
        if record is None:
            continue
        check.record = record
        if why:
            check.fail("track", why)
            continue
        if spec is not None:
            check_settings(record, spec, settings, check)
            if not check.ok:  # not the track's settings: rejected before any re-evaluation
                continue
        check_identity(record, check)
        check_integrity(path, record, check, reevaluate=reevaluate, data_root=data_root)
        oracle.check(record, check)
        if spec is not None:
            check_track(record, spec, check)
    report = SubmitReport(spec, checks, reevaluate=reevaluate, left_out=left_out)
    cell_ids = [c.record.cell_id for c in checks if c.record is not None]
    dupes = sorted({i for i in cell_ids if cell_ids.count(i) > 1})
    if dupes:
        report.group_problems.append(("identity", f"cell id(s) submitted twice: {dupes}"))
    if spec is not None:
        report.group_problems.extend(
            check_seeds([c.record for c in checks if c.record is not None], spec)
        )
    if spec is not None:
        report.notes += sweep_notes([c.record for c in checks if c.record is not None], spec)
    if report.ok:
        report.plugin_sources = _plugin_sources(checks, plugin_sources)
    if report.ok and out is not None:
        report.bundle = write_bundle(report, Path(out))
    return report


def _plugin_sources(checks: Sequence[RecordCheck], given: Sequence[str]) -> list:
    from benchmark.submission.plugin_sources import PluginSourceError, resolve_sources

    try:
        return resolve_sources([c.record.env.plugins for c in checks if c.record], given)
    except PluginSourceError as exc:
        raise SubmitError(str(exc)) from None


__all__ = ["Track", "find_track", "submit"]
