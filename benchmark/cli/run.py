"""``run``: the cells of a grid, through run_grid."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.cli.common import (
    _launcher_config,
    _load_cells,
    _options,
    grid_cost,
    grid_spec,
    parse_seeds,
)
from benchmark.core.terminal import printable

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell


# run --dry-run: the plan is valid but datasets are missing (`prefetch --grid NAME` fetches them)
EXIT_DATA_MISSING = 3


def _dry_run(args: argparse.Namespace) -> int:
    """Everything ``run`` checks at the door, nothing run or written: configuration, device,
    precision, data presence, partitions and each method's own data check. Missing data is part of
    the plan: per dataset, the cells waiting on it and what fetching it downloads (exit 3)."""
    from benchmark.core.errors import MissingData
    from benchmark.launchers.run_grid import plan_run
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

    from benchmark.launchers.run_grid import run_grid

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

    summary = run_grid(
        grid_spec(args.grid, args.add_method, args.add_task),
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


def _build_site(root: Path, out: Path) -> None:
    try:  # the command line is the top layer: it may import the site (docs/architecture.md §6)
        from leaderboard.site import build_site

        print(f"leaderboard: {build_site([root], out)}")
    except ImportError as exc:  # the leaderboard is optional for a run
        print(f"leaderboard not built: {exc}", file=sys.stderr)
