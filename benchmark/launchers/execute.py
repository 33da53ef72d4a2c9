"""The unit every launcher runs: claim a cell, run it under its locks (execute_cell); come back to
cells another runner held (settle_claimed)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from benchmark.launchers.options import RunOptions
from benchmark.runroot.rundir import RunDir

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

Status = Literal["done", "skipped", "failed", "diverged", "claimed", "interrupted"]


@dataclass(frozen=True)
class CellOutcome:
    cell_id: str
    status: Status
    error: str | None = None
    record_path: str | None = None


def _finished(cell: Cell, rd: RunDir) -> CellOutcome | None:
    """The outcome of a cell another attempt already finished (done) or failed, else None."""
    if rd.done:
        return CellOutcome(cell.cell_id, "skipped", record_path=str(rd.record_path))
    if rd.failed:
        return CellOutcome(
            cell.cell_id, "failed", error=f"failed in another runner: {rd.error_reason()}"
        )
    return None


def execute_cell(
    cell: Cell,
    root: Path,
    options: RunOptions | None = None,
    *,
    grid: str | None = None,
    owner: str | None = None,
    claim_timeout_s: float | None = None,
    stop_after_round: int | None = None,
    on_round: Callable[[int, Mapping[str, float]], None] | None = None,
) -> CellOutcome:
    """Claim, run (or resume) and release one cell; the picklable unit every launcher calls.

    ``owner`` names the job across restarts (a SLURM job id survives requeue), so a requeued job
    takes back the claim its previous life left behind. ``stop_after_round`` ends pre-training early
    (outcome ``interrupted``).
    """
    from benchmark.portable import mode as portable
    from benchmark.runroot import locks

    options = options or RunOptions()
    # before torch is imported (a fresh worker): enter the cell's kernel mode; once it is, refuse
    # a cell whose mode is not the process's
    portable.activate(cell.kernels, options.device)
    rd = RunDir.of(cell, root)
    if rd.done:
        return CellOutcome(cell.cell_id, "skipped", record_path=str(rd.record_path))
    timeout = locks.TIMEOUT_S if claim_timeout_s is None else claim_timeout_s
    claim = locks.try_claim(rd.claim_path, owner=owner, timeout_s=timeout, purpose="cell")
    if claim is None:
        return CellOutcome(
            cell.cell_id,
            "claimed",
            error=f"claimed by {locks.describe(locks.read_claim(rd.claim_path))}",
        )
    if claim.took_over is not None:
        rd.log_attempt("took_over", previous=claim.took_over)
        print(
            f"{cell.cell_id}: took over the claim of a runner that is gone ({claim.took_over}); "
            "resuming its cell",
            file=sys.stderr,
            flush=True,
        )
    try:
        # re-check under the claim: another runner may have finished or failed it between our plan
        # and our claim
        return _finished(cell, rd) or _run_claimed(
            cell, rd, options, grid, owner, timeout, stop_after_round, on_round
        )
    finally:
        claim.release()


def _run_claimed(
    cell: Cell,
    rd: RunDir,
    options: RunOptions,
    grid: str | None,
    owner: str | None,
    timeout: float,
    stop_after_round: int | None,
    on_round: Callable[[int, Mapping[str, float]], None] | None,
) -> CellOutcome:
    """The claimed cell: wait for (or take) its pre-training lock, run it with the cell's thread
    count, log."""
    import torch

    from benchmark.engine.runner import CellFailed, run_cell
    from benchmark.engine.tracking import NullTracker, WandbTracker
    from benchmark.runroot import locks

    pre_lock = None
    if rd.pretrain.pretrained:  # a runner killed before releasing the lock of a finished one
        locks.clear_stale(rd.pretrain.lock, timeout_s=timeout)
    else:
        pre_lock = locks.wait_claim(
            rd.pretrain.lock, owner=owner, timeout_s=timeout, purpose=f"pretrain for {cell.cell_id}"
        )

    def round_done(r: int, metrics: Mapping[str, float]) -> None:
        rd.log_attempt("round", round=r, pretrain_key=cell.pretrain_key)
        if on_round is not None:
            on_round(r, metrics)

    rd.log_attempt("start", owner=owner, pretrained=rd.pretrain.pretrained)
    done_rounds = [] if rd.pretrain.pretrained else rd.pretrain.checkpoint_rounds()
    if done_rounds:  # the engine resumes from the latest round checkpoint: say which
        rounds = cell.fl.rounds
        print(
            f"{cell.cell_id}: resuming from the checkpoint of round {done_rounds[-1]} of {rounds} "
            f"(rounds {done_rounds[-1] + 1}..{rounds} to run)",
            file=sys.stderr,
            flush=True,
        )
        rd.log_attempt("resume", round=done_rounds[-1], pretrain_key=cell.pretrain_key)
    threads, threads_before = options.cell_threads(), torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        record = run_cell(
            cell,
            rd.root,
            device=options.device,
            tracker=WandbTracker() if options.wandb else NullTracker(),
            data_root=options.data_root,
            grid=grid,
            stop_after_round=stop_after_round,
            on_round=round_done,
            on_pretrained=pre_lock.release if pre_lock is not None else None,
            concurrency=options.concurrency,
        )
    except CellFailed as exc:
        rd.log_attempt("end", status="failed")
        return CellOutcome(cell.cell_id, "failed", error=str(exc))
    finally:
        torch.set_num_threads(threads_before)
        if pre_lock is not None:
            pre_lock.release()
    rd.log_attempt("end", status="interrupted" if record is None else record.status)
    if record is None:
        return CellOutcome(
            cell.cell_id, "interrupted", error=f"stopped after round {stop_after_round}"
        )
    status: Status = "diverged" if record.status == "diverged" else "done"
    return CellOutcome(cell.cell_id, status, error=record.reason, record_path=str(rd.record_path))


def settle_claimed(
    cells: Sequence[Cell], root: Path, run: Callable[[Cell], CellOutcome], *, poll_s: float = 2.0
) -> Iterator[CellOutcome]:
    """Wait for cells another runner holds: yield each one's outcome once it is done or failed
    there, or run it here (``run``) once its claim is released or stale. Never runs a cell that a
    live runner holds."""
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


def run_then_settle(
    first: Iterable[CellOutcome],
    cells: Sequence[Cell],
    root: Path,
    run: Callable[[Cell], CellOutcome],
    *,
    poll_s: float = 2.0,
    wait: bool = True,
) -> Iterator[CellOutcome]:
    """The loop every launcher runs: the outcomes of a first pass over ``cells`` as they come,
    cells another runner held set aside (unless ``wait`` is False: then reported as claimed), and
    then settled (:func:`settle_claimed`, ``run`` running a released one here)."""
    by_id = {c.cell_id: c for c in cells}
    claimed = []
    try:
        for outcome in first:
            if outcome.status == "claimed" and wait:
                claimed.append(by_id[outcome.cell_id])
            else:
                yield outcome
    finally:  # closed with this generator: the first pass's workers stop now, not at GC
        close = getattr(first, "close", None)
        if close is not None:
            close()
    yield from settle_claimed(claimed, root, run, poll_s=poll_s)


def write_failure(cell: Cell, root: Path, reason: str) -> None:
    """A launcher's record of a cell its worker could not finish (killed, lost): the reason, unless
    it is done."""
    rd = RunDir.of(cell, root)
    if not rd.done:
        rd.write_error(reason, tb="")
