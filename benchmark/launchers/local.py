"""The local launcher: cells run in worker processes on this machine (one per core by default, each cell on one CPU
thread), or one after another in this process (``workers=1``); a failing cell never stops the grid.

Every cell's numbers depend only on the cell: a worker pins the cell's intra-op threads exactly as the in-process
path does (``RunOptions.cell_threads``), so a grid run with four workers writes the same records as a sequential run
(tests/integration/test_launchers_agree.py). Workers are separate processes (spawned, not forked, so no thread or
CUDA state is inherited); cells sharing one pre-training wait for each other through the pre-training lock.

``execute_cell`` is the unit every launcher runs (in this process, in a Ray worker, in a SLURM array task). It
claims the cell (``benchmark.locks``) so that two runners on the same run root never work on one cell at the same
time, and locks the shared pre-training folder so that cells with the same ``pretrain_key`` never train it twice
concurrently. A cell claimed by a live runner comes back as ``claimed``; launchers set it aside and come back to it
(``settle_claimed``) until the other runner finished it, failed it, or died (its claim then goes stale).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from benchmark.options import RunOptions
from benchmark.registries import LAUNCHERS
from benchmark.rundir import RunDir

Status = Literal["done", "skipped", "failed", "diverged", "claimed", "interrupted"]
Progress = Callable[[Any, "CellOutcome"], None]


@dataclass(frozen=True)
class CellOutcome:
    cell_id: str
    status: Status
    error: str | None = None
    record_path: str | None = None


def _finished(cell: Any, rd: RunDir) -> CellOutcome | None:
    """The outcome of a cell another attempt already finished (done) or failed, else None."""
    if rd.done:
        return CellOutcome(cell.cell_id, "skipped", record_path=str(rd.record_path))
    if rd.failed:
        return CellOutcome(cell.cell_id, "failed", error=f"failed in another runner: {rd.error_reason()}")
    return None


def execute_cell(cell: Any, root: Path, options: RunOptions | None = None, *, grid: str | None = None,
                 owner: str | None = None, claim_timeout_s: float | None = None,
                 stop_after_round: int | None = None,
                 on_round: Callable[[int, Mapping[str, float]], None] | None = None) -> CellOutcome:
    """Claim, run (or resume) and release one cell; the picklable unit every launcher calls.

    ``owner`` names the job across restarts (a SLURM job id survives requeue), so a requeued job takes back the
    claim its previous life left behind. ``stop_after_round`` ends pre-training early (outcome ``interrupted``).
    """
    from benchmark import locks

    options = options or RunOptions()
    rd = RunDir.of(cell, root)
    if rd.done:
        return CellOutcome(cell.cell_id, "skipped", record_path=str(rd.record_path))
    timeout = locks.TIMEOUT_S if claim_timeout_s is None else claim_timeout_s
    claim = locks.try_claim(rd.claim_path, owner=owner, timeout_s=timeout, purpose="cell")
    if claim is None:
        return CellOutcome(cell.cell_id, "claimed", error=f"claimed by {locks.describe(locks.read_claim(rd.claim_path))}")
    try:
        # re-check under the claim: another runner may have finished or failed it between our plan and our claim
        return _finished(cell, rd) or _run_claimed(cell, rd, options, grid, owner, timeout, stop_after_round, on_round)
    finally:
        claim.release()


def _run_claimed(cell: Any, rd: RunDir, options: RunOptions, grid: str | None, owner: str | None, timeout: float,
                 stop_after_round: int | None,
                 on_round: Callable[[int, Mapping[str, float]], None] | None) -> CellOutcome:
    """The claimed cell: wait for (or take) its pre-training lock, run it with the cell's thread count, log."""
    import torch

    from benchmark import locks
    from benchmark.runner import CellFailed, run_cell
    from benchmark.tracking import NullTracker, WandbTracker

    pre_lock = None
    if not rd.pretrain.pretrained:
        pre_lock = locks.wait_claim(rd.pretrain.lock, owner=owner, timeout_s=timeout,
                                    purpose=f"pretrain for {cell.cell_id}")

    def round_done(r: int, metrics: Mapping[str, float]) -> None:
        rd.log_attempt("round", round=r, pretrain_key=cell.pretrain_key)
        if on_round is not None:
            on_round(r, metrics)

    rd.log_attempt("start", owner=owner, pretrained=rd.pretrain.pretrained)
    threads, threads_before = options.cell_threads(), torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        record = run_cell(cell, rd.root, device=options.device,
                          tracker=WandbTracker() if options.wandb else NullTracker(), data_root=options.data_root,
                          grid=grid, stop_after_round=stop_after_round, on_round=round_done,
                          on_pretrained=pre_lock.release if pre_lock is not None else None)
    except CellFailed as exc:
        rd.log_attempt("end", status="failed")
        return CellOutcome(cell.cell_id, "failed", error=str(exc))
    finally:
        torch.set_num_threads(threads_before)
        if pre_lock is not None:
            pre_lock.release()
    rd.log_attempt("end", status="interrupted" if record is None else record.status)
    if record is None:
        return CellOutcome(cell.cell_id, "interrupted", error=f"stopped after round {stop_after_round}")
    status: Status = "diverged" if record.status == "diverged" else "done"
    return CellOutcome(cell.cell_id, status, error=record.reason, record_path=str(rd.record_path))


def settle_claimed(cells: Sequence[Any], root: Path, run: Callable[[Any], CellOutcome], *,
                   poll_s: float = 2.0) -> Iterator[CellOutcome]:
    """Wait for cells another runner holds: yield each one's outcome once it is done or failed there, or run it
    here (``run``) once its claim is released or stale. Never runs a cell that a live runner holds."""
    waiting = list(cells)
    while waiting:
        still = []
        for cell in waiting:
            outcome = _finished(cell, RunDir.of(cell, root)) or run(cell)
            if outcome.status == "claimed":
                still.append(cell)
            else:
                yield outcome
        waiting = still
        if waiting:
            time.sleep(poll_s)


def write_failure(cell: Any, root: Path, reason: str) -> None:
    """A launcher's record of a cell its worker could not finish (killed, lost): the reason, unless it is done."""
    rd = RunDir.of(cell, root)
    if not rd.done:
        rd.write_error(reason, tb="")


def default_workers() -> int:
    """One worker per core this process may use (each cell runs on one intra-op thread)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _run_in_worker(cell: Any, root: str, options: RunOptions, grid: str | None) -> CellOutcome:
    """The body of a worker task (module-level, so it pickles by reference)."""
    return execute_cell(cell, Path(root), options, grid=grid)


@LAUNCHERS.register("local")
@dataclass(frozen=True, kw_only=True)
class LocalLauncher:
    """Cells in worker processes on this machine (``workers``: 0 = one per core), or in this process (1)."""

    options: RunOptions = field(default_factory=RunOptions)
    workers: int = 0  # 0: one per core (default_workers); 1: one after another in this process
    wait_claimed: bool = True  # come back to cells another runner holds, so `run` ends with the grid complete
    claim_poll_s: float = 2.0

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0 (0: one per core), got {self.workers}")

    def launch(self, cells: Sequence, root: Path, *, grid: str | None = None,
               progress: Progress | None = None) -> Iterator[CellOutcome]:
        workers = min(self.workers or default_workers(), max(len(cells), 1))
        by_id = {c.cell_id: c for c in cells}

        def emit(outcome: CellOutcome) -> CellOutcome:
            if progress is not None:
                progress(by_id[outcome.cell_id], outcome)
            return outcome

        def run_here(cell: Any) -> CellOutcome:
            return execute_cell(cell, root, self.options, grid=grid)

        first = self._in_pool(cells, root, grid, workers) if workers > 1 else map(run_here, cells)
        claimed = []
        for outcome in first:
            if outcome.status == "claimed" and self.wait_claimed:
                claimed.append(by_id[outcome.cell_id])
            else:
                yield emit(outcome)
        for outcome in settle_claimed(claimed, root, run_here, poll_s=self.claim_poll_s):
            yield emit(outcome)

    def _in_pool(self, cells: Sequence[Any], root: Path, grid: str | None, workers: int) -> Iterator[CellOutcome]:
        """Each cell in a worker process, outcomes as cells finish; a worker that dies fails only its cell."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_run_in_worker, cell, str(root), self.options, grid): cell for cell in cells}
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


__all__ = ["CellOutcome", "LocalLauncher", "Progress", "execute_cell", "settle_claimed", "write_failure"]
