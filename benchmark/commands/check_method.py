"""``python -m benchmark check-method NAME``: conformance checks a method must pass before its
numbers count.

Runs the method on the embedded ``digits`` data with the micro backbone of its ``smoke_settings``
(CPU, one thread as ``run`` uses; about 20 s on 2 cores):

==========================
===================================================================================== check
what it asserts ==========================
===================================================================================== ``interface``
the class declares name, version, Config (a dataclass), requires, payload_up/down,
                            and ``Config()`` builds from the cell's resolved params
``finite_losses``           no client update raises ``Diverged``; every ``loss*`` metric a client
reports is finite ``declared_payloads``       every tensor sent down or up matches a declared
``payload_down`` / ``payload_up``
                            pattern (named tensor in the reason) and every payload value is a tensor (so the
                            bytes counted are the bytes sent); declared patterns that this config does not use
                            are reported, not failed (a class declares the traffic of all its configs)
``declared_traffic``        a method that declares its traffic (``declared_traffic``, plugin API
                            2.5): summed over each round's sampled clients, on the cell's initial
                            server state, it equals the runner's own count byte for byte, and the
                            final server model has the initial one's tensors; a method declaring
                            none passes with a note (its rows are badged "traffic not derived")
``determinism``             two fresh method instances with one seed: identical round-1 payloads,
and identical
                            server and client states after round 1 (the second run is the interrupted one below)
``resume``                  stop after round 1, a *fresh* method instance resumes from the
checkpoint (client
                            states read back from disk): final server and client states equal the straight run's
``upload_fold``             a method's optional ``upload_fold`` finishes to ``server_aggregate``
                            of the same uploads, bit for bit (skipped for methods without one)
``live_settings``           every config field moves the first round of a tiny cell or is declared
                            inert with a reason (``benchmark.commands.live_settings``)
``knn_above_no_pretrain``   kNN top-1 of the exported encoder exceeds ``no_pretrain`` (the seeded
random init of
                            the same backbone) on the same data
==========================
=====================================================================================

All checks share two simulations (one straight, one interrupted after round 1 and resumed), so the
whole check costs about two short pre-trainings plus two kNN evaluations. A simulation runs when the
first check that reads it runs, inside that check's timer, so each line's time is the work done for
that check (``interface`` builds the smoke cell's data and partition, ``finite_losses`` runs the
straight simulation, ``determinism`` the interrupted one, ``resume`` its resumption). The report names every
failed check with its reason; ``check-method`` exits 1 when any check fails.

``state_read`` and ``state_evolves`` (``benchmark.commands.state_checks``) drive one client alone for
two rounds, whatever ``--rounds`` says: each piece of its client state must be read (perturbing it
before round 2 changes the upload or the rest of the state) and each piece the method declares
evolving (``evolving_client_state``) must change between its rounds.

The smoke-cell builder lives in ``benchmark.commands.smoke`` (re-exported here and by
``tests/helpers.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import math
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.commands.check_result import CheckResult
from benchmark.commands.smoke import (
    SMOKE_OVERRIDES,
    cell_threads,
    smoke_cell,
    smoke_method_settings,
)
from benchmark.commands.state_digests import (
    checkpoint_digests,
    client_digest,
    differing_keys,
    payload_where,
    tensor_digest,
)
from benchmark.contracts.method import FEDERATIONS
from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.core.errors import UsageError

REFERENCE_METHOD = "no_pretrain"  # what the kNN check compares against (the seeded random init)


# ------------------------------------------------------------------------------------------------
# the report


@dataclass(frozen=True)
class ConformanceReport:
    method: str
    results: tuple[CheckResult, ...]
    measurements: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def failed(self) -> list[str]:
        return [r.name for r in self.results if r.status == "fail"]

    def result(self, name: str) -> CheckResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def format(self) -> str:
        lines = [f"check-method {self.method}"]
        for r in self.results:
            mark = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}[r.status]
            lines.append(
                f"  {mark}  {r.name:24s} {r.detail}"
                + (f"  ({r.seconds:.1f}s)" if r.seconds else "")
            )
        total = f" ({sum(r.seconds for r in self.results):.1f}s in all)"
        if self.ok:
            lines.append(f"{self.method}: all checks passed{total}")
        else:
            lines.append(f"{self.method}: FAILED {', '.join(self.failed)}{total}")
        return "\n".join(lines)


class _Fail(Exception):
    """A check failed with a named reason."""


# ------------------------------------------------------------------------------------------------
# recording


@dataclass
class _Traffic:
    """What one simulation sent: per (round, direction, client) the tensor names and a digest of
    their values."""

    digests: dict[tuple[int, str, int], str] = field(default_factory=dict)
    down_names: set[str] = field(default_factory=set)
    up_names: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    # (round, client, metric, value)
    losses: list[tuple[int, int, str, float]] = field(default_factory=list)
    # (round, fold == server_aggregate bit for bit)
    folds: list[tuple[int, bool]] = field(default_factory=list)


class _Recorder:
    """Wraps a method instance; records every payload it sends and forwards everything else
    unchanged."""

    def __init__(self, method: Any, traffic: _Traffic, public: Any = None) -> None:
        self._method = method
        self._traffic = traffic
        self._public = public

    def __getattr__(self, item: str) -> Any:
        return getattr(self._method, item)

    def _record(self, key: tuple[int, str, int], payload: Any) -> None:
        import torch

        tensors = getattr(payload, "tensors", None)
        if not isinstance(tensors, Mapping):
            self._traffic.problems.append(
                f"round {key[0]} {key[1]}: payload.tensors is not a mapping"
            )
            return
        for name, value in tensors.items():
            if not isinstance(value, torch.Tensor):
                self._traffic.problems.append(
                    f"round {key[0]} {key[1]}: {name!r} is a {type(value).__name__}, "
                    "not a tensor (its bytes would not be counted)"
                )
        (self._traffic.down_names if key[1] == "down" else self._traffic.up_names).update(tensors)
        good = {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)}
        self._traffic.digests[key] = tensor_digest(good)

    def broadcast(self, server: Any, ctx: Any) -> Any:
        down = self._method.broadcast(server, ctx)
        self._record((ctx.round, "down", -1), down)
        return down

    def upload_fold(self, server: Any, sizes: Any, ctx: Any) -> Any:
        hook = getattr(self._method, "upload_fold", None)
        fold = hook(server, sizes, ctx) if hook is not None else None
        return (
            None
            if fold is None
            else _CheckedFold(fold, self._method, server, ctx, self._public, self._traffic)
        )

    def client_update(self, down: Any, state: Any, data: Any, ctx: Any) -> Any:
        up, new_state = self._method.client_update(down, state, data, ctx)
        self._record((ctx.round, "up", int(ctx.client_id)), up)
        for key, value in dict(getattr(up, "metrics", {}) or {}).items():
            if key.startswith("loss"):
                self._traffic.losses.append((ctx.round, int(ctx.client_id), key, float(value)))
        return up, new_state


class _CheckedFold:
    """A method's upload fold that also keeps the uploads, to compare ``finish()`` with
    ``server_aggregate`` of them."""

    def __init__(
        self, fold: Any, method: Any, server: Any, ctx: Any, public: Any, traffic: _Traffic
    ) -> None:
        self._fold, self._method, self._server, self._ctx, self._public = (
            fold,
            method,
            server,
            ctx,
            public,
        )
        self._traffic = traffic
        self._ups: dict[int, Any] = {}

    def add(self, client_id: int, up: Any) -> None:
        import torch

        # a copy: the engine may reuse an upload's tensors once the fold has it
        self._ups[client_id] = dataclasses.replace(
            up,
            tensors={
                k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in up.tensors.items()
            },
        )
        self._fold.add(client_id, up)

    def finish(self) -> Any:
        out = self._fold.finish()
        ref = self._method.server_aggregate(self._server, self._ups, self._ctx, self._public)
        same = (
            tensor_digest(dict(out.model)) == tensor_digest(dict(ref.model))
            and tensor_digest(dict(out.extra)) == tensor_digest(dict(ref.extra))
            and list(out.model) == list(ref.model)
            and dict(out.metrics) == dict(ref.metrics)
        )
        self._traffic.folds.append((self._ctx.round, same))
        return out


@dataclass
class _Run:
    server_digest: str
    client_digests: dict[int, str]
    traffic: _Traffic
    server: Any
    clients: dict[int, Any]
    method: Any
    # the runner's own count of the bytes sent each round (benchmark.engine.rounds.CommCounter)
    comm: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())


# ------------------------------------------------------------------------------------------------
# the check


def _setup(
    name: str, rounds: int, clients: int, participation: float, method_params: dict | None
) -> Any:
    """The smoke cell's prepared stage (``benchmark.engine.stages.prepare``): data, partition,
    clients, settings."""
    from benchmark.engine.stages import prepare

    cell = smoke_cell(
        name,
        rounds=rounds,
        clients=clients,
        participation=participation,
        tasks=["knn"],
        method_params=method_params,
    )
    return prepare(cell)


def _simulate(setup: Any, work_dir: Path, *, stop_after: int | None = None) -> _Run:
    from benchmark.engine.rounds import simulate
    from benchmark.engine.stages import build_method

    traffic = _Traffic()
    # a fresh instance: state hidden in the object shows as a diff
    method = build_method(setup.cell, setup.inputs)
    result = simulate(
        _Recorder(method, traffic, setup.public),
        setup.clients,
        setup.settings,
        work_dir,
        public=setup.public,
        stop_after=stop_after,
        state_mem_budget=0,
    )
    states = {k: result.store.get(k) for k in range(len(setup.clients)) if k in result.store}
    return _Run(
        tensor_digest(dict(result.server.model)) + tensor_digest(dict(result.server.extra)),
        {k: client_digest(s) for k, s in states.items()},
        traffic,
        result.server,
        states,
        method,
        (tuple(result.comm.per_round_up), tuple(result.comm.per_round_down)),
    )


def _knn(setup: Any, method: Any, server: Any, clients: Mapping[int, Any]) -> float:
    """kNN top-1 of the method's exported encoder on the cell's data (the registered ``knn`` task,
    default card)."""
    import torch

    from benchmark.contracts.types import TaskContext
    from benchmark.engine.stages import build_task, export_encoder

    encoder = export_encoder(method, server, clients)
    task = build_task(setup.cell.tasks[0])
    with tempfile.TemporaryDirectory() as tmp:
        ctx = TaskContext(
            dataset=setup.dataset,
            data_root=Path("."),
            out_dir=Path(tmp),
            device=torch.device("cpu"),
            seed=setup.cell.seed,
            feature_cache={},
        )
        return task.run(encoder, ctx).main


@contextmanager
def _timed(results: list[CheckResult], name: str) -> Iterator[Callable[[str], None]]:
    """Run one check: ``_Fail(reason)`` → fail; any other exception → fail with its type and
    message."""
    t0 = time.perf_counter()
    notes: list[str] = []
    try:
        yield notes.append
    except _Fail as exc:
        results.append(CheckResult(name, "fail", str(exc), time.perf_counter() - t0))
    except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check, reported with its reason
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        results.append(
            CheckResult(
                name,
                "fail",
                f"{type(exc).__name__}: {exc} (at {Path(tb.filename).name}:{tb.lineno})",
                time.perf_counter() - t0,
            )
        )
    else:
        results.append(CheckResult(name, "pass", "; ".join(notes), time.perf_counter() - t0))


REQUIRED_ATTRS = ("name", "version", "Config", "requires", "payload_up", "payload_down")
HOOKS = ("init_server", "init_client", "broadcast", "client_update", "server_aggregate", "encoder")


@dataclass
class _Runs:
    """The two simulations every check reads, run when a check first needs them (so each check's
    time is the work done for it): ``a`` straight through, ``r1`` stopped after round 1 (its state
    then is compared with a's round-1 checkpoint: determinism) and ``r`` resumed from it by a fresh
    instance (resume)."""

    setup: Any
    root: Path
    measurements: dict[str, float]
    runs: dict[str, _Run] = field(default_factory=dict)
    crash: dict[str, str] = field(default_factory=dict)
    a_round1: tuple[str, dict[int, str]] | None = None

    def get(self, key: str) -> _Run | None:
        """Run ``key`` ("a", "r1" or "r") unless it ran; None when it (or what it resumes) raised."""
        if key in self.runs or key in self.crash:
            return self.runs.get(key)
        if key == "r" and self.get("r1") is None:
            return None
        t0 = time.perf_counter()
        try:
            # r1 and r share one work folder: r resumes from r1's checkpoint
            self.runs[key] = _simulate(
                self.setup, self.root / key[0], stop_after=1 if key == "r1" else None
            )
            if key == "a":
                self.a_round1 = checkpoint_digests(self.root / "a", 1)
        except Exception as exc:  # noqa: BLE001 - reported by the checks that read it
            self.crash[key] = f"{type(exc).__name__}: {exc}"
        self.measurements[f"simulate_{key}_s"] = time.perf_counter() - t0
        return self.runs.get(key)

    def err(self, *keys: str) -> str | None:
        return next((self.crash[k] for k in keys if k in self.crash), None)


def check_method(
    name: str,
    *,
    rounds: int = 2,
    clients: int = 3,
    participation: float = 0.67,
    method_params: dict | None = None,
    knn: bool = True,
    work_dir: Path | None = None,
    live: bool = False,
) -> ConformanceReport:
    """Run every conformance check on method ``name`` and return the report (never raises for a
    broken method). It runs on the CPU thread count a cell runs with (``RunOptions.cell_threads``:
    one unless ``$FSSL_CELL_THREADS`` says otherwise), as ``run`` does."""
    with cell_threads():
        report = _check_method(
            name, rounds, clients, participation, method_params, knn=knn, work_dir=work_dir
        )
    if not live:  # issue 46: the CLI runs it unless --no-live (a few short rounds per field)
        return report
    from benchmark.commands.live_settings import conformance_result

    with cell_threads():
        result = conformance_result(report.method, method_params)
    return dataclasses.replace(report, results=(*report.results, result))


def _check_method(
    name: str,
    rounds: int,
    clients: int,
    participation: float,
    method_params: dict | None,
    *,
    knn: bool,
    work_dir: Path | None,
) -> ConformanceReport:
    load_builtins()
    results: list[CheckResult] = []
    measurements: dict[str, float] = {}
    canonical = METHODS.canonical(name)
    cls = METHODS.get(canonical)
    setup = _check_interface(cls, canonical, results, rounds, clients, participation, method_params)
    if setup is None:
        return ConformanceReport(canonical, tuple(results))
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        runs = _Runs(setup, Path(tmp), measurements)
        _check_finite_losses(runs, results)
        _check_declared_payloads(cls, runs, results)
        _check_declared_traffic(runs, results)
        _check_determinism(runs, results)
        _check_resume(runs, results, rounds)
        _check_upload_fold(runs, results)
        _check_knn(cls, canonical, setup, runs, knn, rounds, results, measurements)
    from benchmark.commands.state_checks import check_client_state

    results.extend(
        CheckResult(*o) for o in check_client_state(canonical, cls, method_params=method_params)
    )
    return ConformanceReport(canonical, tuple(results), measurements)


def _check_interface(
    cls: Any,
    canonical: str,
    results: list[CheckResult],
    rounds: int,
    clients: int,
    participation: float,
    method_params: dict | None,
) -> Any:
    setup = None
    with _timed(results, "interface") as note:
        missing = [a for a in REQUIRED_ATTRS if not hasattr(cls, a)] + [
            h for h in HOOKS if not callable(getattr(cls, h, None))
        ]
        if missing:
            raise _Fail(f"missing class attributes or hooks: {', '.join(missing)}")
        if not dataclasses.is_dataclass(cls.Config):
            raise _Fail("Config must be a (frozen, kw_only) dataclass")
        if not isinstance(cls.version, str) or not cls.version:
            raise _Fail("version must be a non-empty string (bump it whenever numbers can change)")
        for attr in ("payload_up", "payload_down"):
            if not isinstance(getattr(cls, attr), tuple) or not all(
                isinstance(p, str) for p in getattr(cls, attr)
            ):
                raise _Fail(f"{attr} must be a tuple of fnmatch patterns")
        if cls.federation not in FEDERATIONS:
            raise _Fail(f"federation must be one of {list(FEDERATIONS)}, got {cls.federation!r}")
        setup = _setup(canonical, rounds, clients, participation, method_params)
        note(
            f"{len(setup.clients)} clients, {rounds} rounds, backbone {setup.cell.backbone.label()}"
        )
    return setup


def _check_finite_losses(runs: _Runs, results: list[CheckResult]) -> None:
    with _timed(results, "finite_losses") as note:
        a = runs.get("a")
        if a is None:
            raise _Fail(f"the run raised {runs.err('a')}")
        bad = [(r, k, m, v) for r, k, m, v in a.traffic.losses if not math.isfinite(v)]
        if bad:
            r, k, m, v = bad[0]
            raise _Fail(f"{m}={v} at round {r}, client {k} ({len(bad)} non-finite values)")
        if not a.traffic.losses:
            note("no client reports a loss metric")
        else:
            note(f"{len(a.traffic.losses)} loss values, all finite")


def _check_declared_payloads(cls: Any, runs: _Runs, results: list[CheckResult]) -> None:
    with _timed(results, "declared_payloads") as note:
        a = runs.get("a")
        if a is None:
            raise _Fail("no completed run to inspect")
        problems = list(a.traffic.problems)
        for direction, names, patterns in (
            ("down", a.traffic.down_names, cls.payload_down),
            ("up", a.traffic.up_names, cls.payload_up),
        ):
            undeclared = sorted(
                n for n in names if not any(fnmatch.fnmatch(n, p) for p in patterns)
            )
            if undeclared:
                problems.append(
                    f"undeclared {direction} tensor(s) {undeclared[:5]} (payload_{direction} = "
                    f"{list(patterns)})"
                )
            unused = [p for p in patterns if not any(fnmatch.fnmatch(n, p) for n in names)]
            # declarations are per class, traffic per config (e.g. FedMAE's two aggregation
            # readings)
            if unused:
                note(f"payload_{direction} pattern(s) {unused} unused in this config")
        if problems:
            raise _Fail("; ".join(problems))
        note(
            f"{len(a.traffic.down_names)} down / {len(a.traffic.up_names)} up tensor names, all declared"
        )


NOT_DERIVED_NOTE = (
    "declares no traffic (declared_traffic returns None, the MethodBase default): accept cannot "
    'derive it, so its rows are badged "traffic not derived" and left out of the sort on '
    "communication (docs/adding-a-method.md §1)"
)


def _check_declared_traffic(runs: _Runs, results: list[CheckResult]) -> None:
    """What the method declares it sends (``declared_traffic``, plugin API 2.5), summed over each
    round's sampled clients as ``accept`` sums it (``benchmark.engine.traffic_sum``) on the shapes
    of the cell's initial server state, must be the runner's own count of the straight run, byte
    for byte, round by round; and the run's final server model must hold the initial one's tensors
    (accept refuses a checkpoint whose server tensors are not the cell's)."""
    from benchmark.engine.rounds import sample_clients, server_context
    from benchmark.engine.stages import build_method
    from benchmark.engine.traffic_sum import declares_traffic, derived_traffic, server_tensors
    from benchmark.submission.traffic import server_difference

    with _timed(results, "declared_traffic") as note:
        a = runs.get("a")
        if a is None:
            raise _Fail(f"the run raised {runs.err('a')}")
        if not declares_traffic(a.method):
            note(NOT_DERIVED_NOTE)
            return
        setup = runs.setup
        fresh = build_method(setup.cell, setup.inputs)  # the cell's initial state, as accept's
        initial = fresh.init_server(server_context(setup.settings, 0, setup.public))
        public = setup.partition.public_indices
        sizes = [int(n) for n in setup.partition.sizes()]
        counted_up, counted_down = a.comm
        try:
            derived = derived_traffic(
                fresh,
                setup.cell,
                server_tensors(initial),
                sizes,
                None if public is None else len(public),
                len(counted_up),
            )
        except ValueError as exc:  # not a Sent, or broadcasts of different sizes in one round
            raise _Fail(str(exc)) from None
        if derived is None:
            note(NOT_DERIVED_NOTE)
            return
        clients, per_round = setup.settings.num_clients, setup.settings.per_round
        for r, pair in enumerate(zip(counted_up, derived[0], counted_down, derived[1]), start=1):
            for direction, counted, declared in (("upload", *pair[:2]), ("download", *pair[2:])):
                if counted != declared:
                    sampled = len(sample_clients(setup.cell.seed, r, clients, per_round))
                    raise _Fail(
                        f"round {r} {direction}: the runner counted {counted:,} bytes, "
                        f"declared_traffic sums to {declared:,} bytes over the round's {sampled} "
                        "sampled client(s)"
                    )
        rounds = len(counted_up)
        moved = server_difference(
            a.server,
            initial,
            theirs=f"the server state after {rounds} round{'s' if rounds != 1 else ''}",
            ours="the initial server state",
        )
        if moved is not None:
            raise _Fail(
                f"{moved}: accept derives the traffic from the cell's initial server state and "
                "refuses a checkpoint whose server model is not its"
            )
        note(
            f"the declaration equals the runner's count byte for byte in {rounds} "
            f"round{'s' if rounds != 1 else ''} ({sum(counted_up):,} bytes up, {sum(counted_down):,} down)"
        )


def _check_determinism(runs: _Runs, results: list[CheckResult]) -> None:
    with _timed(results, "determinism") as note:
        a, r1 = runs.get("a"), runs.get("r1")
        if a is None or r1 is None or runs.a_round1 is None:
            raise _Fail(f"a run raised {runs.err('a', 'r1')}")
        first = {k: v for k, v in a.traffic.digests.items() if k[0] == 1}
        diff = differing_keys(first, r1.traffic.digests)
        if diff:
            raise _Fail(
                f"same seed, different payloads: first at {payload_where(diff[0])} ({len(diff)} payloads differ)"
            )
        if runs.a_round1[0] != r1.server_digest:
            raise _Fail("same seed, different server state after round 1")
        cdiff = differing_keys(runs.a_round1[1], r1.client_digests)
        if cdiff:
            raise _Fail(f"same seed, different client state of client(s) {cdiff} after round 1")
        note(
            f"two fresh instances: {len(r1.traffic.digests)} round-1 payloads, the server state and "
            f"{len(r1.client_digests)} client states identical"
        )


def _check_resume(runs: _Runs, results: list[CheckResult], rounds: int) -> None:
    if rounds < 2:  # stopping after round 1 of 1 is the end: nothing would be resumed
        results.append(
            CheckResult("resume", "skip", "needs 2 rounds or more (stopped after round 1 of 1)")
        )
        return
    with _timed(results, "resume") as note:
        a, res = runs.get("a"), runs.get("r")
        if a is None or res is None:
            raise _Fail(f"the interrupted run raised {runs.err('r', 'r1', 'a')}")
        diff = differing_keys(
            {k: v for k, v in a.traffic.digests.items() if k[0] > 1}, res.traffic.digests
        )
        if diff:
            raise _Fail(
                f"resumed run differs from the straight run: first at {payload_where(diff[0])} (state hidden in "
                "the method object, client state lost in the checkpoint, or nondeterminism after round 1)"
            )
        if res.server_digest != a.server_digest:
            raise _Fail("resumed run ends with a different server state")
        cdiff = differing_keys(a.client_digests, res.client_digests)
        if cdiff:
            raise _Fail(
                f"client state of client(s) {cdiff} differs after resume (tensors or last_round)"
            )
        note(
            f"stopped after round 1, resumed by a fresh instance from disk; server and "
            f"{len(res.client_digests)} client states equal the straight run"
        )


def _check_upload_fold(runs: _Runs, results: list[CheckResult]) -> None:
    a = runs.get("a")
    if a is not None and not a.traffic.folds:
        results.append(
            CheckResult(
                "upload_fold",
                "skip",
                "no upload_fold: the engine collects the uploads for server_aggregate",
            )
        )
        return
    with _timed(results, "upload_fold") as note:
        if a is None:
            raise _Fail(f"the run raised {runs.err('a')}")
        bad = [r for r, same in a.traffic.folds if not same]
        if bad:
            raise _Fail(
                f"upload_fold's finish() differs from server_aggregate of the same uploads in round(s) {bad}"
            )
        note(
            f"the fold equals server_aggregate of the same uploads, bit for bit, in {len(a.traffic.folds)} rounds"
        )


def _check_knn(
    cls: Any,
    canonical: str,
    setup: Any,
    runs: _Runs,
    knn: bool,
    rounds: int,
    results: list[CheckResult],
    measurements: dict[str, float],
) -> None:
    exempt = cls.frozen_knn_exempt
    if not knn or canonical == REFERENCE_METHOD or exempt:
        results.append(
            CheckResult(
                "knn_above_no_pretrain",
                "skip",
                "this is the reference"
                if canonical == REFERENCE_METHOD and knn
                else f"declared by the method: {exempt}"
                if exempt and knn
                else "disabled",
            )
        )
        return
    with _timed(results, "knn_above_no_pretrain") as note:
        a = runs.get("a")
        if a is None:
            raise _Fail("no completed run to evaluate")
        mine = _knn(setup, a.method, a.server, a.clients)
        ref = _reference_knn(setup)
        measurements.update(knn_top1=mine, knn_no_pretrain=ref)
        if not mine > ref:
            raise _Fail(
                f"kNN top-1 {mine:.2f} is not above no_pretrain's {ref:.2f} after {rounds} rounds"
            )
        note(f"kNN top-1 {mine:.2f} > no_pretrain {ref:.2f}")


def _reference_knn(setup: Any) -> float:
    """kNN of the seeded random init of the same backbone (``no_pretrain``) on the same cell."""
    from benchmark.engine.rounds import server_context

    ref_cls = METHODS.get(REFERENCE_METHOD)
    # same backbone spec, default (empty) config
    method = ref_cls(ref_cls.Config(), setup.cell.backbone, setup.inputs)
    server = method.init_server(server_context(setup.settings, 0, None))
    return _knn(setup, method, server, {})


__all__ = [
    "SMOKE_OVERRIDES",
    "CheckResult",
    "ConformanceReport",
    "check_in_box",
    "check_method",
    "is_plugin",
    "report_of",
    "smoke_cell",
    "smoke_method_settings",
]


def cmd_check_method(args: argparse.Namespace) -> int:

    if args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    knn, live = not args.no_knn, not args.no_live
    if is_plugin(args.name):  # a stranger's code: imported and called in the box only
        report = check_in_box(
            args.name, rounds=args.rounds, knn=knn, live=live, unboxed=args.unboxed
        )
    else:
        report = check_method(args.name, rounds=args.rounds, knn=knn, live=live)
    print(report.format())
    return 0 if report.ok else 1


# ------------------------------------------------------------------------------------------------
# check-method of a plugin method, in the box (issue 52 item 3)
#
# A maintainer may run ``check-method`` on a stranger's plugin: its import and every call into it
# then happen in a boxed child (``benchmark.submission.box``; the child is this module, run as
# ``python -m benchmark.commands.check_method /box``, job ``check``: own scratch folder as working
# directory and home, an environment without credentials, no network, rlimits, a wall-clock
# deadline; the embedded digits data is the one data set it sees). This process trusts only the
# report the child writes, validated here: a child that exits without one, whatever its exit code,
# is a refusal in one line. Where no box can run, a plugin is refused unless ``--unboxed`` (the
# same child, without the namespaces). Built-in methods are the project's own code: they run in
# this process as before.

STATUSES = ("pass", "fail", "skip")
MAX_CHECKS = 200
MAX_DETAIL_CHARS = 2000


def is_plugin(name: str) -> bool:
    """Whether ``name`` is registered by an installed distribution rather than built in (read from
    the entry points' metadata, nothing imported). An unknown name is left to ``check-method``."""
    from benchmark.contracts.registries import METHODS
    from benchmark.core.registry import BUILT_IN

    return METHODS.origin(name) not in (BUILT_IN, None)


def check_in_box(name: str, *, rounds: int, knn: bool, live: bool, unboxed: bool = False) -> Any:
    """``check_method(name, ...)`` run in the box; the validated
    :class:`~benchmark.commands.check_method.ConformanceReport`. UsageError (one line) when no box
    can run and not ``unboxed``, or the child gives no valid report."""
    from benchmark.submission.box import BoxRefused, box_unavailable, run_boxed

    why = box_unavailable()
    if why is not None and not unboxed:
        raise UsageError(
            f"check-method {name}: a plugin's code runs in a box and none can run here ({why}): "
            "pass --unboxed only if you trust that code"
        )
    try:
        raw = run_boxed(
            {"kind": "check", "method": name, "rounds": rounds, "knn": knn, "live": live},
            what=f"check-method {name} in the box",
            unboxed=why is not None,
            embedded_data=True,
            child="benchmark.commands.check_method",
        )
    except BoxRefused as exc:
        raise UsageError(str(exc)) from None
    return report_of(raw, name)


def report_of(raw: Any, name: str) -> Any:
    """The ConformanceReport the child's answer ``raw`` describes, every field checked."""
    from benchmark.commands.check_result import CheckResult
    from benchmark.core.terminal import printable

    what = f"check-method {name} in the box"
    results = raw.get("results") if isinstance(raw, dict) else None
    method = raw.get("method") if isinstance(raw, dict) else None
    if not isinstance(method, str) or not isinstance(results, list) or not results:
        raise UsageError(f"{what}: the child's answer is not a report")
    if len(results) > MAX_CHECKS or len(method) > 200:
        raise UsageError(f"{what}: the child's report is larger than any check-method's")
    out = []
    for r in results:
        if (
            not isinstance(r, dict)
            or set(r) != {"name", "status", "detail", "seconds"}
            or not isinstance(r["name"], str)
            or len(r["name"]) > 100
            or r["status"] not in STATUSES
            or not isinstance(r["detail"], str)
            or not isinstance(r["seconds"], (int, float))
            or isinstance(r["seconds"], bool)
            or not math.isfinite(r["seconds"])
            or not 0 <= r["seconds"] < 1e7
        ):
            raise UsageError(f"{what}: the child's answer is not a report")
        detail = printable(r["detail"])[:MAX_DETAIL_CHARS]
        out.append(CheckResult(printable(r["name"]), r["status"], detail, float(r["seconds"])))
    return ConformanceReport(printable(method), tuple(out))


def _check(job: dict[str, Any], _box: Any) -> dict[str, Any]:
    """The child's job: the checks, as plain values."""
    import dataclasses

    report = check_method(
        str(job["method"]), rounds=int(job["rounds"]), knn=bool(job["knn"]), live=bool(job["live"])
    )
    return {"method": report.method, "results": [dataclasses.asdict(r) for r in report.results]}


if __name__ == "__main__":
    import sys

    from benchmark.submission.box_child import serve

    sys.exit(serve(Path(sys.argv[1]), {"check": _check}))
