"""The local launcher: cells run one after another in this process; a failing cell never stops the grid.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from benchmark.registries import LAUNCHERS

Status = Literal["done", "skipped", "failed", "diverged", "claimed", "interrupted"]
CLAIM_FILE = "claim.json"
PRETRAIN_LOCK = "lock.json"
ATTEMPTS_LOG = "attempts.jsonl"  # one line per event of each attempt at the cell (start, round, end): provenance


def log_attempt(cell_dir: Path, event: str, **fields: Any) -> None:
    """Append one JSON line to the cell's attempt log (``O_APPEND`` writes of one short line do not interleave)."""
    import json
    import os
    import socket

    line = json.dumps({"event": event, "pid": os.getpid(), "host": socket.gethostname(), "t": time.time(),
                       **fields}, sort_keys=True) + "\n"
    fd = os.open(cell_dir / ATTEMPTS_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


@dataclass(frozen=True)
class CellOutcome:
    cell_id: str
    status: Status
    error: str | None = None
    record_path: str | None = None


def _record_outcome(cell: Any, record_path: Path, status: Status = "skipped") -> CellOutcome:
    return CellOutcome(cell.cell_id, status, record_path=str(record_path))


def _error_reason(path: Path) -> str:
    import json

    try:
        return str(json.loads(path.read_text())["reason"])
    except (OSError, ValueError, KeyError):
        return "(unreadable error.json)"


def cell_threads(device: str) -> int | None:
    """The intra-op thread count a CPU cell runs with, the same under every launcher (None: leave torch alone).

    Float reductions split across threads add in a different order, so the same cell trained with 2 threads and
    with 1 differs in its last bits, and after a few rounds in its scores (measured on the smoke grid: FedEMA's
    kNN 72.1 vs 69.4). A cell's numbers must not depend on where it ran, so every launcher pins the count
    (``FSSL_CELL_THREADS``, default 1) and scales out with processes instead. On CUDA the GPU kernels decide.
    """
    import torch

    if device not in ("cpu", "auto") or (device == "auto" and torch.cuda.is_available()):
        return None
    return int(os.environ.get("FSSL_CELL_THREADS", "1")) or None


def execute_cell(cell: Any, root: Path, *, device: str = "auto", wandb: bool = False, data_root: Any = None,
                 grid: str | None = None, owner: str | None = None, claim_timeout_s: float | None = None,
                 stop_after_round: int | None = None,
                 on_round: Callable[[int, Mapping[str, float]], None] | None = None) -> CellOutcome:
    """Claim, run (or resume) and release one cell; the picklable unit every launcher calls.

    ``owner`` names the job across restarts (a SLURM job id survives requeue), so a requeued job takes back the
    claim its previous life left behind. ``stop_after_round`` ends pre-training early (outcome ``interrupted``).
    """
    from benchmark import locks
    from benchmark.runner import CellFailed, cell_paths, run_cell
    from benchmark.tracking import NullTracker, WandbTracker

    root = Path(root)
    paths = cell_paths(cell, root)
    if paths.record.exists():
        return _record_outcome(cell, paths.record)
    timeout = locks.TIMEOUT_S if claim_timeout_s is None else claim_timeout_s
    claim = locks.try_claim(paths.cell_dir / CLAIM_FILE, owner=owner, timeout_s=timeout, purpose="cell")
    if claim is None:
        return CellOutcome(cell.cell_id, "claimed",
                           error=f"claimed by {locks.describe(locks.read_claim(paths.cell_dir / CLAIM_FILE))}")
    try:
        # re-check under the claim: another runner may have finished or failed it between our plan and our claim
        if paths.record.exists():
            return _record_outcome(cell, paths.record)
        if paths.error.exists():
            return CellOutcome(cell.cell_id, "failed", error=f"failed in another runner: {_error_reason(paths.error)}")
        pre_lock = None
        if not (paths.pretrain_dir / "final.pt").exists():
            pre_lock = locks.wait_claim(paths.pretrain_dir / PRETRAIN_LOCK, owner=owner, timeout_s=timeout,
                                        purpose=f"pretrain for {cell.cell_id}")
        pretrained = (paths.pretrain_dir / "final.pt").exists()

        def round_done(r: int, metrics: Mapping[str, float]) -> None:
            log_attempt(paths.cell_dir, "round", round=r, pretrain_key=cell.pretrain_key)
            if on_round is not None:
                on_round(r, metrics)

        log_attempt(paths.cell_dir, "start", owner=owner, pretrained=pretrained)
        import torch

        threads, threads_before = cell_threads(device), torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            tracker = WandbTracker() if wandb else NullTracker()
            record = run_cell(cell, root, device=device, tracker=tracker, data_root=data_root, grid=grid,
                              stop_after_round=stop_after_round, on_round=round_done,
                              on_pretrained=pre_lock.release if pre_lock is not None else None)
        except CellFailed as exc:
            log_attempt(paths.cell_dir, "end", status="failed")
            return CellOutcome(cell.cell_id, "failed", error=str(exc))
        finally:
            torch.set_num_threads(threads_before)
            if pre_lock is not None:
                pre_lock.release()
        log_attempt(paths.cell_dir, "end", status="interrupted" if record is None else record.status)
    finally:
        claim.release()
    if record is None:
        return CellOutcome(cell.cell_id, "interrupted", error=f"stopped after round {stop_after_round}")
    status: Status = "diverged" if record.status == "diverged" else "done"
    return CellOutcome(cell.cell_id, status, error=record.reason, record_path=str(paths.record))


def settle_claimed(cells: Sequence[Any], root: Path, run: Callable[[Any], CellOutcome], *,
                   poll_s: float = 2.0) -> Iterator[CellOutcome]:
    """Wait for cells another runner holds: yield each one's outcome once it is done or failed there, or run it
    here (``run``) once its claim is released or stale. Never runs a cell that a live runner holds."""
    from benchmark.runner import cell_paths

    waiting = list(cells)
    while waiting:
        still = []
        for cell in waiting:
            paths = cell_paths(cell, root)
            if paths.record.exists():
                yield _record_outcome(cell, paths.record)
                continue
            if paths.error.exists():
                yield CellOutcome(cell.cell_id, "failed", error=f"failed in another runner: "
                                                              f"{_error_reason(paths.error)}")
                continue
            outcome = run(cell)
            if outcome.status == "claimed":
                still.append(cell)
            else:
                yield outcome
        waiting = still
        if waiting:
            time.sleep(poll_s)


@LAUNCHERS.register("local")
@dataclass(frozen=True, kw_only=True)
class LocalLauncher:
    device: str = "auto"
    wandb: bool = True
    data_root: str | None = None
    wait_claimed: bool = True  # come back to cells another runner holds, so `run` ends with the grid complete
    claim_poll_s: float = 2.0

    def launch(self, cells: Sequence, root: Path, *, grid: str | None = None,
               progress: Callable[[object, CellOutcome], None] | None = None) -> Iterator[CellOutcome]:
        def run(cell: Any) -> CellOutcome:
            return execute_cell(cell, root, device=self.device, wandb=self.wandb, data_root=self.data_root,
                                grid=grid)

        def emit(cell: Any, outcome: CellOutcome) -> CellOutcome:
            if progress is not None:
                progress(cell, outcome)
            return outcome

        claimed = []
        for cell in cells:
            outcome = run(cell)
            if outcome.status == "claimed" and self.wait_claimed:
                claimed.append(cell)
                continue
            yield emit(cell, outcome)
        by_id = {c.cell_id: c for c in claimed}
        for outcome in settle_claimed(claimed, root, run, poll_s=self.claim_poll_s):
            yield emit(by_id[outcome.cell_id], outcome)
