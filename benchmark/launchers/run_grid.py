"""``run_grid``: the programmatic entry point (as lm-eval's ``simple_evaluate``); ``python -m
benchmark run`` calls it.

    from benchmark.launchers.options import RunOptions
    from benchmark.launchers.run_grid import run_grid
    summary = run_grid("quickstart", root="runs", options=RunOptions(device="cpu"))
    summary.failed          # the cells that raised, each with its reason

Steps: load and expand the grid (strict validation), check the data (fast, then full: partitions can
be drawn), leave out cells already finished (or failed, unless ``retry_failed``), build the launcher
from typed options, run the rest, and return what happened to each cell.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.core.errors import MissingData, UsageError
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
    from benchmark.engine.sharing import shared_last

    # cells that copy another cell's numbers (benchmark.engine.sharing) run after it
    todo = shared_last(plan.todo)
    outcomes = tuple(launcher.launch(todo, root, grid=plan.grid.name, progress=progress))
    return RunSummary(
        plan.grid.name, root, len(plan.cells), plan.skipped, outcomes, plan.failed_before
    )


__all__ = ["Plan", "RunSummary", "build_launcher", "load_cells", "plan_run", "run_grid"]
