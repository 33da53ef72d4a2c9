"""The checks a submitted record passes (schema, identity, integrity, track, seeds), one
RecordCheck each."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.contracts.cell import pretrain_key_for
from benchmark.core import bounded_json
from benchmark.core.canonical import bytes_sha256, to_plain
from benchmark.records.identity import cell_id_of
from benchmark.records.schema import (
    SCHEMA_VERSION,
    RecordError,
    ResultRecord,
    TaskScores,
    from_json,
)
from benchmark.records.tracks import Track
from benchmark.runroot.rundir import RunDir

if TYPE_CHECKING:
    from benchmark.submission.plugin_sources import PluginSource

VERIFIED_RUNNER = "fssl-bench"


class SubmitError(ValueError):
    """Bad input to submit (unknown track, unreadable tracks file, nothing to submit)."""


@dataclass
class RecordCheck:
    path: Path
    record: ResultRecord | None
    problems: list[tuple[str, str]] = field(default_factory=list)  # (check name, reason)
    sealed: bool = False  # the runner's sidecars were present and matched
    reevaluated: bool = False  # the submitter's re-run reproduced every score within tolerance
    # the encoder checkpoint the record's tasks need (its run root's final.pt)
    checkpoint: Path | None = None
    score_checks: list[Any] = field(
        default_factory=list
    )  # benchmark.records.acceptance_files.ScoreCheck

    @property
    def ok(self) -> bool:
        return not self.problems

    def fail(self, check: str, reason: str) -> None:
        self.problems.append((check, reason))

    @property
    def verified(self) -> bool:
        return (
            self.ok
            and self.record is not None
            and self.record.env.runner == VERIFIED_RUNNER
            and self.sealed
        )


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
    # where the maintainers get the records' plugins (a wheel to copy into the bundle, or a URL)
    plugin_sources: list[tuple[PluginSource, Path | None]] = field(default_factory=list)
    # records that are not on the track (Track.admits said why), decided before any other check:
    # listed, not bundled, never re-evaluated
    left_out: list[tuple[Path, str, str]] = field(default_factory=list)  # (path, cell id, why)
    # said, not failed: e.g. a plugin whose settings the track's validation sweep did not choose
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks) and not self.group_problems

    def reasons(self) -> list[str]:
        """Every failure as ``check: reason`` (check names are stable; tests and scripts match on
        them)."""
        out = [f"{name}: {c.path}: {reason}" for c in self.checks for name, reason in c.problems]
        return out + [f"{name}: {reason}" for name, reason in self.group_problems]

    def format(self) -> str:
        lines = []
        for c in self.checks:
            label = c.record.cell_id if c.record else c.path.name
            if c.ok:
                tag = (
                    "verified"
                    if c.verified
                    else "unverified (not from the fssl-bench runner, or unsealed)"
                )
                tag += ", re-evaluated" if c.reevaluated else ", not re-evaluated"
                lines.append(f"  OK    {label}  {c.path}  [{tag}]")
            else:
                for name, reason in c.problems:
                    lines.append(f"  FAIL  {label}  {name}: {reason}")
        for name, reason in self.group_problems:
            lines.append(f"  FAIL  {name}: {reason}")
        for path, cell_id, why in self.left_out:
            lines.append(f"  LEFT OUT  {cell_id}  {path}: not on the track: {why}")
        lines += [f"  NOTE  {note}" for note in self.notes]
        n_bad = sum(not c.ok for c in self.checks)
        head = f"submit: {len(self.checks)} record(s), {n_bad} rejected" + (
            f", track {self.track.id}" if self.track else ""
        )
        if self.left_out:
            head += f"; {len(self.left_out)} left out (not on the track, not bundled)"
        tail = "no bundle written"
        if not self.checks and self.left_out:
            tail += ": no record is on the track"
        if self.bundle:
            tail = (
                f"bundle written to {self.bundle}: {self.bundle_bytes:,} bytes on disk; its files "
                f"{self.unpacked_bytes:,} bytes, of which final pre-training states (the "
                f"server state the encoder is rebuilt from) {self.checkpoint_bytes:,} bytes"
            )
            for source, _ in self.plugin_sources:
                tail += f"\nplugin source for the maintainers: {source.describe()}"
            if not self.reevaluate:
                tail += (
                    "\nnot re-evaluated (--no-reevaluate): the manifest says so; the scores rest on the runner's "
                    "word until the maintainers' accept step re-runs them"
                )
        return "\n".join([head, *lines, tail])


def _scores_plain(s: TaskScores) -> dict[str, Any]:
    return to_plain(s)


def schema_message(version: Any) -> str:
    """The one command that helps with a record of another schema version, or that none can."""
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        return (
            f"schema_version {version} was written by a newer fssl-bench (this one reads {SCHEMA_VERSION}): "
            "upgrade fssl-bench (pip install -U fssl-bench)"
        )
    if isinstance(version, int) and not isinstance(version, bool) and 0 < version < SCHEMA_VERSION:
        return (
            f"schema_version {version} is older than {SCHEMA_VERSION}: re-run its cell with this version "
            "(records are sealed by the runner that wrote them; a migrated copy would not be)"
        )
    return f"schema_version {version!r} is not a version any fssl-bench wrote: the file is not a record"


def check_schema(path: Path, check: RecordCheck) -> ResultRecord | None:
    try:
        text = path.read_text(encoding="utf-8")
        raw = bounded_json.loads(text)
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
        check.fail(
            "identity",
            f"cell_id {record.cell_id} does not match the cell's content ({cell_id_of(cell)})",
        )
    if pretrain_key_for(cell) != record.pretrain_key:
        check.fail(
            "identity",
            f"pretrain_key {record.pretrain_key} does not match the cell ({pretrain_key_for(cell)})",
        )
    method = cell.get("method") or {}
    for label, have, want in (
        ("method", record.method, method.get("name")),
        ("method_version", record.method_version, method.get("version")),
        ("dataset", record.dataset, (cell.get("dataset") or {}).get("name")),
        ("seed", record.seed, cell.get("seed")),
    ):
        if have != want:
            check.fail("identity", f"{label} {have!r} does not match the cell's {want!r}")


def version_problems(record: ResultRecord, declared: Mapping[str, Any] | None = None) -> list[str]:
    """Each component of the record's cell (dataset, backbone, method, partition, public split,
    tasks) whose version is not the installed component's: a version that does not exist here names
    code nobody can re-run, and a made-up task version made one checkpoint count as another seed
    (issue 44). [] when every version is the installed one. ``declared`` (``accept``: method name
    -> its declaration in the box, ``benchmark.submission.retrain``): a plugin method's version is
    the one it declared there, and its code is not imported here."""
    from benchmark.contracts.registries import (
        BACKBONES,
        DATASETS,
        METHODS,
        PARTITIONERS,
        PUBLIC_SPLITS,
        TASKS,
        load_builtins,
    )
    from benchmark.grids.expand import component_version

    load_builtins()
    cell = dict(record.cell)
    named = [
        ("dataset", DATASETS, cell.get("dataset")),
        ("backbone", BACKBONES, cell.get("backbone")),
        ("method", METHODS, cell.get("method")),
        ("partition", PARTITIONERS, cell.get("partition")),
        ("public", PUBLIC_SPLITS, cell.get("public")),
    ]
    named += [(f"tasks[{i}]", TASKS, t) for i, t in enumerate(cell.get("tasks") or [])]
    out = []
    for where, registry, spec in named:
        if not isinstance(spec, Mapping) or spec.get("name") not in registry:
            continue  # absent (public: null), or not installed: said by the plugin check
        try:
            task = _declared_task(record, registry, spec, declared)
            if task is not None:
                if "error" in task:
                    out.append(f"cell.{where} {spec['name']!r} cannot be built: {task['error']}")
                elif spec.get("version") != task["version"]:
                    out.append(
                        f"cell.{where} {spec['name']!r} version {spec.get('version')!r} is not "
                        f"the version the installed plugin declares {task['version']!r}"
                    )
                continue
            boxed = _declared_plugin(registry, spec["name"], declared)
        except ValueError as exc:
            out.append(f"cell.{where} {spec['name']!r}: {exc}")
            continue
        if boxed is not None:
            have = boxed.version
            if spec.get("version") != have:
                out.append(
                    f"cell.{where} {spec['name']!r} version {spec.get('version')!r} is not the "
                    f"version the installed plugin declares {have!r}"
                )
            continue
        try:
            have = component_version(registry, registry.get(spec["name"]))
        except Exception as exc:  # noqa: BLE001 - a component that cannot load is refused
            out.append(f"cell.{where} {spec['name']!r} cannot be loaded here: {exc}")
            continue
        if spec.get("version") != have:
            out.append(
                f"cell.{where} {spec['name']!r} version {spec.get('version')!r} is not the "
                f"installed version {have!r} (an unknown version names code that cannot be re-run)"
            )
    return out


def _declared_plugin(registry: Any, name: str, declared: Mapping[str, Any] | None) -> Any:
    """The declaration (made in the box) of the plugin method ``name`` when ``declared`` is given
    (``accept``); None for a built-in or another kind of component, or outside ``accept``.
    ``ValueError`` when ``accept`` reached a plugin method it did not import in the box."""
    from benchmark.contracts.registries import METHODS
    from benchmark.core.registry import BUILT_IN

    if declared is None or registry is not METHODS or METHODS.origin(name) == BUILT_IN:
        return None
    if name not in declared:
        raise ValueError(f"plugin method {name!r} was not imported in the box")
    return declared[name]


def _declared_task(
    record: ResultRecord, registry: Any, spec: Mapping[str, Any], declared: Mapping[str, Any] | None
) -> Mapping[str, str] | None:
    """What the plugin task ``spec`` of ``record`` declared in the box (``accept``: its version
    and card, or why it cannot be built); None for a built-in or another kind of component, or
    outside ``accept``. ``ValueError`` when ``accept`` did not ask the box about it."""
    from benchmark.contracts.registries import TASKS
    from benchmark.core.registry import BUILT_IN

    name = spec.get("name")
    if declared is None or registry is not TASKS or TASKS.origin(name) in (BUILT_IN, None):
        return None
    if record.method not in declared:
        raise ValueError(f"plugin task {name!r} was not built in the box")
    params = spec.get("params") if isinstance(spec.get("params"), Mapping) else {}
    return declared[record.method].task(name, params)


def check_integrity(
    path: Path,
    record: ResultRecord,
    check: RecordCheck,
    *,
    reevaluate: bool = True,
    data_root: str | None = None,
) -> None:
    from benchmark.records.integrity import integrity_problems

    for problem in integrity_problems(record):  # the record's own digest, with or without sidecars
        check.fail("integrity", problem)
    rd = RunDir.from_record_file(path, record)
    if rd is None or not rd.score_files():
        if record.env.runner == VERIFIED_RUNNER:
            check.fail(
                "integrity",
                "the record claims env.runner 'fssl-bench' but has no runner sidecars "
                "(submit the record in its run root, not a copy)",
            )
        return
    _check_sidecars(rd, record, check)
    _check_final_state(rd, record, check, reevaluate, data_root)
    if check.ok:
        check.sealed = True


def _check_sidecars(rd: RunDir, record: ResultRecord, check: RecordCheck) -> None:
    """The record's scores and partition digest equal what the runner wrote beside it as each task
    finished."""
    sidecars: dict[tuple[str, str], dict[str, Any]] = {}
    for side in rd.score_files():
        try:
            raw = bounded_json.loads(side.read_text(encoding="utf-8"))
            sidecars[
                (raw["task"], TaskScores(**{**raw, "card": _card(raw["card"])}).card.card_id)
            ] = raw
        except Exception as exc:  # noqa: BLE001 - an unreadable sidecar is an integrity failure
            check.fail("integrity", f"unreadable scores sidecar {side.name}: {exc}")
    for s in record.scores:
        side = sidecars.pop((s.task, s.card.card_id), None)
        side_name = rd.relative(rd.score_path(s.task, s.card.card_id))
        if side is None:
            check.fail(
                "integrity",
                f"score {s.task}/{s.card.card_id} has no sidecar {side_name} (the card or the "
                "scores were edited)",
            )
            continue
        mine = _scores_plain(s)
        for key in ("values", "main_metric", "higher_is_better", "card"):
            if mine.get(key) != side.get(key):
                check.fail(
                    "integrity",
                    f"{s.task} {key} in the record {mine.get(key)!r} differ from the runner's "
                    f"{side_name} {side.get(key)!r} (edited after it was written)",
                )
    if record.status == "ok" and sidecars:
        check.fail(
            "integrity",
            f"the runner wrote scores the record lacks: {sorted(k[0] for k in sidecars)}",
        )
    if rd.partition_file.exists():
        try:
            pdig = rd.read_partition().get("digest")
        except json.JSONDecodeError:
            pdig = None
        if pdig != record.partition_digest:
            check.fail(
                "integrity",
                f"partition_digest {record.partition_digest[:12]}… differs from the runner's "
                f"{rd.relative(rd.partition_file)} ({str(pdig)[:12]}…)",
            )


def _check_final_state(
    rd: RunDir,
    record: ResultRecord,
    check: RecordCheck,
    reevaluate: bool,
    data_root: str | None = None,
) -> None:
    """The saved pre-trained state hashes to the record's final-state digest (and travels in the
    bundle); ``reevaluate``: re-run the record's tasks from it."""
    final = rd.pretrain.final
    # a diverged record has no scores to re-run
    needs = record.status == "ok" and bool(record.scores)
    if not final.exists():
        if reevaluate and needs:
            check.fail(
                "integrity",
                f"re-evaluation needs the saved pre-trained state {rd.relative(final)} (pass "
                "--no-reevaluate to skip it: the bundle then says the scores were not "
                "re-evaluated and carries no checkpoint)",
            )
        return
    if not record.final_state_digest or not needs:
        return
    from benchmark.engine.pretrained import Pretrained

    try:  # tensors and plain values only: a run folder may be someone else's (docs/submitting.md)
        pre = Pretrained.load(final, untrusted=True)
    except Exception as exc:  # noqa: BLE001 - one that needs full unpickling is refused
        check.fail(
            "integrity",
            f"{rd.relative(final)} does not load as tensors and plain values "
            f"(refused, not unpickled): {type(exc).__name__}",
        )
        return
    try:
        bound = pre.state_digest() == record.final_state_digest
    except TypeError as exc:
        check.fail("integrity", f"{rd.relative(final)} holds a value that is not a tensor: {exc}")
        return
    if not bound:
        check.fail(
            "integrity",
            f"final_state_digest does not match the saved pre-trained state {rd.relative(final)} "
            "(every tensor its evaluation reads: server model and extra, kept client states)",
        )
        return
    check.checkpoint = final
    if reevaluate:
        _reevaluate(record, pre, check, data_root)


def _card(raw: Mapping[str, Any]) -> Any:
    from benchmark.records.schema import ProtocolCard

    return ProtocolCard(**raw)


def _reevaluate(record: ResultRecord, pre: Any, check: RecordCheck, data_root: str | None) -> None:
    """Rebuild the encoder from the saved pre-trained state and re-run the record's tasks (the
    runner's stages, as ``accept`` does); every value must be reproduced within its task's
    tolerance."""
    from benchmark.submission.reevaluation import reevaluate

    check.score_checks, _ = reevaluate(record, pre, data_root=data_root)
    for c in check.score_checks:
        if not c.ok:
            check.fail("integrity", f"re-evaluating from the final checkpoint: {c.line()}")
    check.reevaluated = all(c.ok for c in check.score_checks)


def check_track(
    record: ResultRecord,
    track: Track,
    check: RecordCheck,
    declared: Mapping[str, Any] | None = None,
) -> None:
    """``declared`` (``accept``): a plugin task's card is the one it built in the box, its code
    not imported here."""
    why = track.admits(record)  # the site build's membership rule, the same function
    if why:
        check.fail("track", why)
        return
    if record.status != "ok":
        return  # a diverged record has no scores; it is shown as diverged, not dropped
    scores = [s for s in record.scores if s.task == track.task]
    expected = _current_cards(record, declared)
    for s in scores:
        if track.card is not None and s.card.name != track.card:
            check.fail("track", f"{s.task} card {s.card.name!r} is not the track's {track.card!r}")
        if track.card_id is not None and s.card.card_id != track.card_id:
            check.fail(
                "track", f"{s.task} card_id {s.card.card_id} is not the track's {track.card_id}"
            )
        if s.card.selects_on_test:
            check.fail("track", f"{s.task} card selects on the test set ({s.card.selection})")
        if expected is not None and s.card.card_id not in expected.get(s.task, set()):
            check.fail(
                "track",
                f"{s.task} card_id {s.card.card_id} is not the card the registered task builds "
                f"from the cell's config ({sorted(expected.get(s.task, set()))})",
            )


def grid_settings(track: Track) -> list[str] | None:
    """The settings of every cell of the track's grid (canonical JSON of the cell without its
    method and seed), or None when the track names no grid."""
    if track.grid is None:
        return None
    from benchmark.core.canonical import canonical_json
    from benchmark.grids.expand import expand_grid, load_grid

    return sorted(
        {canonical_json(_settings(c.to_dict())) for c in expand_grid(load_grid(track.grid))}
    )


def _settings(cell: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in dict(cell).items() if k not in ("method", "seed")}


def _task_name(spec: Any) -> Any:
    return spec.get("name") if isinstance(spec, Mapping) else spec


def _without_added_tasks(mine: dict[str, Any], grid: list[dict[str, Any]]) -> dict[str, Any]:
    """The record's settings without the tasks no cell of the grid runs (``run --add-task``: a
    plugin task scored beside the track's own; the cells pre-train as the grid's do, and its scores
    are on no track)."""
    known = {_task_name(t) for g in grid for t in g.get("tasks") or []}
    tasks = mine.get("tasks")
    if not isinstance(tasks, list):
        return mine
    return {**mine, "tasks": [t for t in tasks if _task_name(t) in known]}


def check_settings(
    record: ResultRecord, track: Track, settings: list[str] | None, check: RecordCheck
) -> None:
    """The record's cell, but for its method and seed, is a cell of the track's grid: the setting
    the track ranks, not a copy of it edited by hand."""
    if settings is None:
        return
    import json

    from benchmark.core.canonical import canonical_json

    grid = [json.loads(s) for s in settings]
    mine = _without_added_tasks(_settings(record.cell), grid)
    if canonical_json(mine) in settings:
        return
    differ = min(
        (
            [
                k
                for k in set(mine) | set(g)
                if canonical_json(mine.get(k)) != canonical_json(g.get(k))
            ]
            for g in grid
        ),
        key=len,
    )
    check.fail(
        "settings",
        f"the cell's {', '.join(sorted(differ))} differ from every cell of the track's grid "
        f"{track.grid!r} (run the grid itself: python -m benchmark run --grid {track.grid} "
        f"--add-method {record.method})",
    )


def sweep_notes(records: Iterable[ResultRecord], track: Track) -> list[str]:
    """One line per plugin method whose settings the track's validation sweep cannot have chosen:
    the track's grid NAME has a sweep grid ``NAME_tune`` (quickstart_tune, whose sweep chose every
    built-in's batch size and learning rate) and the record's values of the swept fields are none
    of the variants ``run --grid NAME_tune --add-method M`` runs (FedSimSiam at its paper's
    B = 512 on clients of ~144 images). A plugin at one of the variants is not flagged: which one
    the sweep chose is in its validation records, not in these."""
    if track.grid is None:
        return []
    from benchmark.grids.expand import GRIDS_DIR, load_grid, sweep_variants

    tune = f"{track.grid}_tune"
    if not (GRIDS_DIR / f"{tune}.yaml").is_file():
        return []
    sweep = load_grid(tune).sweep
    if not sweep:
        return []
    out: dict[str, str] = {}
    for record in records:
        method = record.method
        if method in out or f"method:{method}" not in dict(record.env.plugins):
            continue
        try:
            variants = sweep_variants(sweep, method)
        except Exception:  # noqa: BLE001, S112 - the plugin is not installed here: nothing to compare
            continue
        params = dict(record.cell.get("method", {}).get("params") or {})
        mine = {k: params.get(k) for k in variants[0] if k != "name"}
        if not mine or any(all(params.get(k) == v[k] for k in mine) for v in variants):
            continue
        shown = ", ".join(f"{k}={v}" for k, v in sorted(mine.items()))
        out[method] = (
            f"plugin {method!r}: its settings ({shown}) were not chosen by the track's validation "
            f"sweep, as every built-in's were: python -m benchmark run --grid {tune} "
            f"--add-method {method}, then python -m benchmark.commands.tuning --root RUNS "
            f"--add-method {method} prints the run line with its choice"
        )
    return list(out.values())


def _current_cards(
    record: ResultRecord, declared: Mapping[str, Any] | None = None
) -> dict[str, set[str]] | None:
    """task name → card ids the registered tasks build today from the cell's task configs (None:
    unavailable). ``declared`` (``accept``): a plugin task's card id is the one it built in the
    box."""
    try:
        from benchmark.contracts.registries import TASKS, load_builtins
        from benchmark.core.config import from_mapping

        load_builtins()
        out: dict[str, set[str]] = defaultdict(set)
        for spec in record.cell.get("tasks") or []:
            task = _declared_task(record, TASKS, spec, declared)
            if task is not None:
                if "card_id" in task:
                    out[spec["name"]].add(task["card_id"])
                continue
            cls = TASKS.get(spec["name"])
            out[spec["name"]].add(
                cls(from_mapping(cls.Config, dict(spec.get("params") or {}))).card().card_id
            )
        return dict(out)
    except Exception:  # noqa: BLE001 - without the task code the card cannot be rebuilt; other checks still run
        return None


def check_seeds(records: Iterable[ResultRecord], track: Track) -> list[tuple[str, str]]:
    """Every configuration (the cell without its seed) must come with ``track.min_seeds`` distinct
    seeds."""
    from benchmark.core.canonical import canonical_json

    groups: dict[str, set[int]] = defaultdict(set)
    labels: dict[str, str] = {}
    for r in records:
        body = {k: v for k, v in dict(r.cell).items() if k != "seed"}
        key = bytes_sha256(canonical_json(body).encode())[:16]
        groups[key].add(int(r.seed))
        labels[key] = f"{r.method} | {r.partition_label}"
    return [
        (
            "seeds",
            f"{labels[k]}: {len(s)} seed(s) {sorted(s)}, the track requires {track.min_seeds}",
        )
        for k, s in sorted(groups.items())
        if len(s) < track.min_seeds
    ]
