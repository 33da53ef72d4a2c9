"""The local launcher: cells run in worker processes on this machine (one per core by default, each
cell on one CPU thread), or one after another in this process (``workers=1``); a failing cell never
stops the grid.

Every cell's numbers depend only on the cell: a worker pins the cell's intra-op threads exactly as
the in-process path does (``RunOptions.cell_threads``), so a grid run with four workers writes the
same records as a sequential run (tests/integration/test_launchers_agree.py). Workers are separate
processes (spawned, not forked, so no thread or CUDA state is inherited); cells sharing one
pre-training wait for each other through the pre-training lock.

``execute_cell`` is the unit every launcher runs (in this process, in a Ray worker, in a SLURM array
task). It claims the cell (``benchmark.runroot.locks``) so that two runners on the same run root
never work on one cell at the same time, and locks the shared pre-training folder so that cells with
the same ``pretrain_key`` never train it twice concurrently. A cell claimed by a live runner comes
back as ``claimed``; launchers set it aside and come back to it (``settle_claimed``) until the other
runner finished it, failed it, or died (its claim then goes stale).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark.core import portable
from benchmark.launchers.execute import (
    CellOutcome,
    execute_cell,
    run_then_settle,
    write_failure,
)
from benchmark.launchers.options import RunOptions

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

Progress = Callable[["Cell", "CellOutcome"], None]


def default_workers() -> int:
    """One worker per core this process may use (each cell runs on one intra-op thread)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def by_kernels(cells: Sequence[Cell]) -> list[tuple[str, list[Cell]]]:
    """The cells grouped by kernel mode (``benchmark.core.portable``), in their order: a process
    runs one mode."""
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.kernels, []).append(cell)
    return list(groups.items())


def runs_here(kernels: str) -> bool:
    """Can this process run a cell of ``kernels`` mode (torch not imported yet, or imported in
    that mode)?"""
    return "torch" not in sys.modules or portable.process_kernels() == kernels


def _run_in_worker(cell: Cell, root: str, options: RunOptions, grid: str | None) -> CellOutcome:
    """The body of a worker task (module-level, so it pickles by reference)."""
    return execute_cell(cell, Path(root), options, grid=grid)


@dataclass(frozen=True, kw_only=True)
class LocalLauncher:
    """Cells in worker processes on this machine (``workers``: 0 = one per core), or in this process
    (1)."""

    options: RunOptions = field(default_factory=RunOptions)
    workers: int = 0  # 0: one per core (default_workers); 1: one after another in this process
    # come back to cells another runner holds, so `run` ends with the grid complete
    wait_claimed: bool = True
    claim_poll_s: float = 2.0

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0 (0: one per core), got {self.workers}")

    def launch(
        self,
        cells: Sequence,
        root: Path,
        *,
        grid: str | None = None,
        progress: Progress | None = None,
    ) -> Iterator[CellOutcome]:
        workers = min(self.workers or default_workers(), max(len(cells), 1))
        by_id = {c.cell_id: c for c in cells}

        def emit(outcome: CellOutcome) -> CellOutcome:
            if progress is not None:
                progress(by_id[outcome.cell_id], outcome)
            return outcome

        def run_here(cell: Cell) -> CellOutcome:
            kernels = cell.kernels
            if runs_here(kernels):
                return execute_cell(cell, root, self.options, grid=grid)
            # a fresh process in the cell's mode
            return next(self._in_pool([cell], root, grid, 1, kernels))

        def first() -> Iterator[CellOutcome]:
            for kernels, group in by_kernels(cells):
                if workers > 1 or not runs_here(kernels):
                    yield from self._in_pool(group, root, grid, min(workers, len(group)), kernels)
                else:
                    yield from map(run_here, group)

        settled = run_then_settle(
            first(), cells, root, run_here, poll_s=self.claim_poll_s, wait=self.wait_claimed
        )
        for outcome in settled:
            yield emit(outcome)

    def _in_pool(
        self,
        cells: Sequence[Cell],
        root: Path,
        grid: str | None,
        workers: int,
        kernels: str = portable.NATIVE,
    ) -> Iterator[CellOutcome]:
        """Each cell in a worker process, outcomes as cells finish; a worker that dies fails only
        its cell. The workers start in ``kernels`` mode: its variables are in their environment
        before they import torch."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(
            max_workers=workers, mp_context=spawn, initializer=portable.enter, initargs=(kernels,)
        ) as pool:
            # the workers are started (and inherit this environment) while the cells are submitted
            with portable.child_environment(kernels):
                futures = {
                    pool.submit(_run_in_worker, cell, str(root), self.options, grid): cell
                    for cell in cells
                }
            try:
                for future in as_completed(futures):
                    cell = futures[future]
                    try:
                        yield future.result()
                    except Exception as exc:  # noqa: BLE001 - the worker died (OOM killer, a crash outside the cell)
                        reason = f"worker failed: {type(exc).__name__}: {exc}"
                        write_failure(cell, root, reason)
                        yield CellOutcome(cell.cell_id, "failed", error=reason)
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise


__all__ = ["LocalLauncher", "Progress"]
