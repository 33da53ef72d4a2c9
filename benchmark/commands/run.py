"""``python -m benchmark run``: the subcommand, whole. ``cmd_run`` (the parsed arguments) calls
``run_grid``, the programmatic entry point (as lm-eval's ``simple_evaluate``):

    from benchmark.launchers.options import RunOptions
    summary = run_grid("quickstart", root="runs", options=RunOptions(device="cpu"))
    summary.failed          # the cells that raised, each with its reason

Steps: load and expand the grid (strict validation), check the data (fast, then full: partitions can
be drawn), leave out cells already finished (or failed, unless ``retry_failed``), build the launcher
from typed options, run the rest, and return what happened to each cell. A launcher only decides
where each cell runs (benchmark/launchers/).

What the grid subcommands share lives here too: ``grid_spec`` (``--grid`` with ``--add-method`` and
``--add-task``), ``parse_seeds``, the cost line of ``plan`` and ``run --dry-run`` (``grid_cost``)
and the exit code of bad input (``EXIT_BAD_INPUT``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.core.errors import MissingData, UsageError
from benchmark.core.terminal import printable
from benchmark.launchers.execute import CellOutcome
from benchmark.launchers.local import Progress
from benchmark.launchers.options import RunOptions
from benchmark.runroot.rundir import RunDir

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell


@dataclass(frozen=True)
class RunSummary:
    grid: str
    root: Path
    cells: int  # in the grid (after --only / --seeds)
    skipped: int  # finished before (or failed before, without retry_failed): not run again
    outcomes: tuple[CellOutcome, ...] = ()  # one per cell run (or attempted) now
    # of the skipped: cells whose earlier attempt failed (re-run with retry_failed)
    failed_before: int = 0

    @property
    def exit_code(self) -> int:
        """The CLI's policy: 0 every cell done or skipped as finished; 1 some cell failed or
        diverged (now, or failed in an earlier attempt this run left alone). (2, a usage error,
        never gets this far.)"""
        return 1 if self.failed or self.diverged or self.failed_before else 0

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes) + (
            self.skipped if status == "skipped" else 0
        )

    @property
    def failed(self) -> list[CellOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def diverged(self) -> list[CellOutcome]:
        return [o for o in self.outcomes if o.status == "diverged"]


@dataclass(frozen=True)
class Plan:
    """The cells of a grid split into those to run now and those left alone."""

    grid: Any
    cells: list[Cell]
    todo: list[Cell] = field(default_factory=list)
    skipped: int = 0
    failed_before: int = 0  # skipped because an earlier attempt failed (no retry_failed)


def load_cells(
    grid: Any, *, only: Mapping[str, str] | str | None = None, seeds: Sequence[int] | None = None
) -> tuple[Any, list[Any]]:
    """The grid (a ``GridSpec``, a name or a path) and its expanded, validated cells."""
    from benchmark.grids.expand import GridSpec, expand_grid, load_grid, parse_only, with_seeds

    spec = grid if isinstance(grid, GridSpec) else load_grid(grid)
    if seeds is not None:
        spec = with_seeds(spec, list(seeds))
    return spec, expand_grid(
        spec, only=parse_only(only) if isinstance(only, str) or only is None else only
    )


def grid_argument(spec: Any) -> str:
    """What ``--grid`` takes to name ``spec`` again: a shipped grid's name, else its file."""
    from benchmark.grids.expand import GRIDS_DIR

    path = Path(spec.path) if spec.path else None
    if path is None or (path.parent == GRIDS_DIR and path.stem == spec.name):
        return str(spec.name)
    return str(path)


def plan_run(
    grid: Any,
    *,
    root: Path | str,
    options: RunOptions,
    only: Mapping[str, str] | str | None = None,
    seeds: Sequence[int] | None = None,
    retry_failed: bool = False,
) -> Plan:
    """Validate everything a run needs and decide which cells run; raises ``UsageError`` /
    ``MissingData``."""
    from benchmark.grids.expand import GridSpec, load_grid
    from benchmark.launchers.options import check_device
    from benchmark.launchers.preflight import (
        check_precision,
        download_size,
        grid_data_needs,
        preflight,
    )

    check_device(options.device)
    spec = grid if isinstance(grid, GridSpec) else load_grid(grid)
    said = {  # how the missing-data error names the grid and data root in its prefetch command
        "grid_arg": grid_argument(spec),
        "data_root": None if options.data_root is None else str(options.data_root),
    }
    absent = [n for n in grid_data_needs(spec, options.data_root) if not n.available]
    if absent:  # found before torch is imported
        lines = [n.how_to_get for n in absent]
        raise MissingData(spec.name, lines, download=download_size(absent), **said)
    spec, cells = load_cells(spec, only=only, seeds=seeds)
    missing = preflight(cells, options.data_root)
    if missing:
        raise MissingData(spec.name, missing, **said)
    check_precision(cells, options.device)
    todo, skipped, failed_before = [], 0, 0
    for cell in cells:
        rd = RunDir.of(cell, root)
        if rd.done or (rd.failed and not retry_failed):
            skipped += 1
            failed_before += int(not rd.done)
            continue
        if retry_failed:
            rd.clear_error()
        todo.append(cell)
    return Plan(spec, cells, todo, skipped, failed_before)


def build_launcher(name: str, options: RunOptions, config: Mapping[str, Any] | None = None) -> Any:
    """A registered launcher built from its typed config (unknown or mistyped keys raise
    ``ConfigError``)."""
    from benchmark.contracts.registries import LAUNCHERS, load_builtins
    from benchmark.core.config import from_mapping

    load_builtins()
    return from_mapping(LAUNCHERS.get(name), {**dict(config or {}), "options": options})


def prepare_root(root: Path) -> bool:
    """Create the run root (with missing parents) and check it is writable; True when it was created
    now. A root that cannot hold cells is a UsageError naming the folder, before any cell runs."""
    created = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(
            f"run root {root}: not writable ({exc.strerror or exc}); choose another --root"
        ) from None
    return created


def run_grid(
    grid: Any,
    *,
    root: Path | str = "runs",
    options: RunOptions | None = None,
    launcher: str | Any = "local",
    launcher_config: Mapping[str, Any] | None = None,
    only: Mapping[str, str] | str | None = None,
    seeds: Sequence[int] | None = None,
    retry_failed: bool = False,
    progress: Progress | None = None,
    on_plan: Callable[[Plan], None] | None = None,
) -> RunSummary:
    """Run (or resume) every cell of ``grid`` under ``root`` and return what happened to each.

    ``launcher`` is a registered name ("local", "ray", "slurm") built from ``launcher_config`` and
    ``options``, or a launcher object. ``progress(cell, outcome)`` is called as each cell ends;
    ``on_plan(plan)`` once before the first.
    """
    options = options or RunOptions()
    root = Path(root)
    plan = plan_run(
        grid, root=root, options=options, only=only, seeds=seeds, retry_failed=retry_failed
    )
    if plan.todo and prepare_root(root):
        print(f"created run root {root.resolve()}", file=sys.stderr)
    if on_plan is not None:
        on_plan(plan)
    if isinstance(launcher, str):
        launcher = build_launcher(launcher, options, launcher_config)
    elif launcher_config:
        raise UsageError("launcher_config goes with a launcher name, not a launcher object")
    from benchmark.launchers.order import launch_order

    # the cells that compute, longest first (their shipped records' times), then the cells that
    # copy another cell's numbers (benchmark.engine.sharing), after the cells they copy
    todo = launch_order(plan.todo)
    outcomes = tuple(launcher.launch(todo, root, grid=plan.grid.name, progress=progress))
    return RunSummary(
        plan.grid.name, root, len(plan.cells), plan.skipped, outcomes, plan.failed_before
    )


__all__ = ["Plan", "RunSummary", "build_launcher", "load_cells", "plan_run", "run_grid"]


# bad input (UsageError and the config / registry / partition errors): one line, nothing written
EXIT_BAD_INPUT = 2


def _load_cells(
    grid_arg: Any,
    only: str | None,
    seeds: str | None = None,
    add_method: Any = (),
    add_task: Any = (),
) -> tuple[Any, list[Any]]:

    spec = grid_spec(grid_arg, add_method, add_task)
    return load_cells(spec, only=only, seeds=parse_seeds(seeds) if seeds is not None else None)


def grid_spec(grid_arg: Any, add_method: Any = (), add_task: Any = ()) -> Any:
    """The grid ``--grid`` names, with the methods of ``--add-method`` added to its method axis
    and the tasks of ``--add-task`` to its cells' task lists."""
    from benchmark.grids.expand import load_grid, with_methods, with_tasks

    grid = with_methods(load_grid(grid_arg), list(add_method or ()))
    return with_tasks(grid, list(add_task or ()))


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must list distinct non-negative integers, got {text!r}")
    return seeds


def device_name(device: str) -> str:
    """The model of the device a run on ``device`` would use (a GPU's name, else the CPU's)."""
    import torch

    from benchmark.launchers.options import check_device
    from benchmark.records.env_info import machine_model

    check_device(device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return machine_model(device)


def grid_cost(cells: list[Cell], device: str, explicit: str | None) -> str:
    """The cost line of ``run --dry-run`` and ``plan``: from the calibration of the device the run
    would use (benchmark/calibration/projection.py says where it looks), else plan's FLOP model."""
    from benchmark.calibration.projection import cost_line, usable_calibration

    calibration, why = usable_calibration(device_name(device), explicit)
    return cost_line(cells, calibration, why)


def _options(args: argparse.Namespace) -> Any:
    from benchmark.launchers.options import RunOptions

    return RunOptions(device=args.device, wandb=not args.no_wandb, data_root=args.data_root)


def _launcher_config(args: argparse.Namespace) -> dict[str, Any]:
    """The chosen launcher's typed config from its command-line options (validated by
    ``build_launcher``)."""
    if args.launcher == "ray":
        return {
            "address": args.ray_address,
            "cpus_per_cell": args.cpus_per_cell,
            "gpus_per_cell": args.gpus_per_cell,
        }
    if args.launcher in ("slurm", "submitit"):
        gpus = args.gpus_per_cell
        return {
            "folder": args.slurm_folder,
            "cluster": args.slurm_cluster,
            "partition": args.slurm_partition,
            "timeout_min": args.slurm_time,
            "gpus_per_node": int(gpus) if gpus >= 1 else 0,
            "cpus_per_task": max(1, int(args.cpus_per_cell)),
            "array_parallelism": args.slurm_parallelism,
        }
    return {
        "workers": args.workers,
        "cells_per_gpu": getattr(args, "cells_per_gpu", 1),
        "gpu_mem_per_cell": getattr(args, "gpu_mem_per_cell", 0.0),
    }


# run --dry-run: the plan is valid but datasets are missing (`prefetch --grid NAME` fetches them)
EXIT_DATA_MISSING = 3


def _dry_run(args: argparse.Namespace) -> int:
    """Everything ``run`` checks at the door, nothing run or written: configuration, device,
    precision, data presence, partitions and each method's own data check. Missing data is part of
    the plan: per dataset, the cells waiting on it and what fetching it downloads (exit 3)."""
    from benchmark.core.errors import MissingData
    from benchmark.runroot.rundir import RunDir

    grid, cells = _load_cells(args.grid, args.only, args.seeds, args.add_method, args.add_task)
    for cell in cells:
        state = RunDir.of(cell, args.root).status(cell.fl.rounds).state
        print(
            f"{cell.cell_id}  {state:8s}  {cell.label()}  tasks={','.join(t.name for t in cell.tasks)}"
        )
    print(grid_cost(cells, args.device, args.calibration))
    try:
        plan = plan_run(
            grid_spec(args.grid, args.add_method, args.add_task),
            root=args.root,
            options=_options(args),
            only=args.only,
            seeds=parse_seeds(args.seeds) if args.seeds is not None else None,
            retry_failed=False,
        )
    except MissingData as exc:
        print(
            f"{len(cells)} cells in grid {grid.name!r}: configuration validated; data missing, so "
            "partitions and method settings were not checked"
        )
        _print_missing(cells, args.data_root, exc)
        return EXIT_DATA_MISSING
    print(
        f"{len(plan.cells)} cells in grid {plan.grid.name!r}: configuration, device, data presence and partitions "
        f"validated; {len(plan.todo)} would run"
    )
    return 0


def _print_missing(cells: list[Cell], data_root: str | None, exc: Any) -> None:
    """The missing part of the plan: per absent dataset the cells of this plan waiting on it and
    what fetching it downloads, then the one command that fetches them all."""
    from benchmark.contracts.registries import DATASETS
    from benchmark.contracts.task import task_datasets
    from benchmark.core.config import from_mapping
    from benchmark.data.datasets import resolve_data_root
    from benchmark.launchers.preflight import download_size, format_bytes

    root = resolve_data_root(data_root)
    waiting: dict[str, int] = {}
    for cell in cells:
        names = {cell.dataset.name} | {
            DATASETS.canonical(n) for t in cell.tasks for n in task_datasets(t.name, t.params)
        }
        for name in names:
            waiting[name] = waiting.get(name, 0) + 1
    absent = []
    for name in sorted(waiting):
        cfg = from_mapping(DATASETS.get(name), {})
        if not cfg.available(root):
            absent.append((name, cfg))
    print(f"missing data ({len(absent)} dataset(s) under {printable(root)}):")
    for name, cfg in absent:
        size = getattr(cfg, "download_bytes", None)
        shown = f"{format_bytes(size)} to fetch" if size else "size not stated"
        login = ", needs a Hugging Face login" if getattr(cfg, "gated", False) else ""
        print(f"  {name:14s} {waiting[name]:5d} cells waiting  {shown}{login}")
    total = download_size([_Sized(getattr(cfg, "download_bytes", None)) for _, cfg in absent])
    print(f"fetch {total or 'them'} with: {exc.prefetch_command}")


class _Sized:
    def __init__(self, download_bytes: int | None) -> None:
        self.download_bytes = download_bytes


def cmd_run(args: argparse.Namespace) -> int:
    if args.dry_run:
        return _dry_run(args)
    from tqdm import tqdm

    bar: Any = None

    def on_plan(plan: Any) -> None:
        nonlocal bar
        print(
            f"grid {plan.grid.name!r}: {len(plan.cells)} cells, {plan.skipped} already finished or failed, "
            f"{len(plan.todo)} to run (root {args.root})"
        )
        bar = tqdm(total=len(plan.todo), desc="cells", unit="cell", disable=not plan.todo)

    def progress(cell: Cell, outcome: Any) -> None:
        bar.update(1)
        if outcome.status in ("failed", "diverged"):
            tqdm.write(f"  {outcome.status} {outcome.cell_id}: {outcome.error}")

    spec = grid_spec(args.grid, args.add_method, args.add_task)
    _enter_the_cells_mode(spec, args)
    summary = run_grid(
        spec,
        root=args.root,
        options=_options(args),
        launcher=args.launcher,
        launcher_config=_launcher_config(args),
        only=args.only,
        seeds=parse_seeds(args.seeds) if args.seeds is not None else None,
        retry_failed=args.retry_failed,
        progress=progress,
        on_plan=on_plan,
    )
    if bar is not None:
        bar.close()
    print(
        f"done: {summary.count('done')}  diverged: {summary.count('diverged')}  failed: {summary.count('failed')}  "
        f"skipped: {summary.count('skipped')}"
    )
    if summary.failed_before:
        print(
            f"{summary.failed_before} cell(s) failed in an earlier attempt and were left alone: `python -m benchmark "
            "status` shows why; re-run them with --retry-failed",
            file=sys.stderr,
        )
    if args.site:
        _build_site(Path(args.root), Path(args.site))
    return summary.exit_code


def grid_kernels(spec: Any) -> str | None:
    """The kernel mode (``benchmark.portable.mode``) of every cell of ``spec`` when the grid sets it
    once, in its base, read without expanding it (which imports torch); None when an axis, an
    exclusion, ``method_common`` or a method's ``with:`` mentions ``kernels`` (only the expansion
    knows then)."""

    def mentions(value: Any) -> bool:
        if isinstance(value, Mapping):
            return "kernels" in value or any(mentions(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return any(mentions(v) for v in value)
        return False

    if mentions(spec.axes) or mentions(spec.method_common) or mentions(list(spec.exclude)):
        return None
    return str(spec.base.get("kernels", "native"))


def _enter_the_cells_mode(spec: Any, args: argparse.Namespace) -> None:
    """``run --workers 1`` computes its cells in this process, which the local launcher allows only
    in the process's own kernel mode: torch is imported (native) to expand the grid, so a portable
    grid's cells went to a worker process of their own, a second start of torch and the registry
    (seconds of CPU). When every cell's mode is known from the grid and torch is not imported yet,
    this process enters that mode first, as a worker does (``benchmark.launchers.local``), and
    computes the cells itself. A native grid needs nothing: this process is native already."""
    from benchmark.portable import mode as portable

    if args.launcher != "local" or args.workers != 1 or "torch" in sys.modules:
        return
    if grid_kernels(spec) == portable.PORTABLE:
        portable.enter(portable.PORTABLE)


def _build_site(root: Path, out: Path) -> None:
    try:  # the command line is the top layer: it may import the site (docs/architecture.md §6)
        from leaderboard.site import build_site

        print(f"leaderboard: {build_site([root], out)}")
    except ImportError as exc:  # the leaderboard is optional for a run
        print(f"leaderboard not built: {exc}", file=sys.stderr)
