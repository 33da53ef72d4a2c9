"""The local launcher: cells run in worker processes on this machine (one per core by default, each
cell on one CPU thread; on CUDA one per GPU, or ``cells_per_gpu`` per GPU where its free memory
holds them, each pinned to its GPU with the cores shared out: ``benchmark.launchers.gpu_policy``),
or one at a time (``workers=1``: in this process where it can run the cell's kernel mode, else in
one fresh worker process at a time); a failing cell never stops the grid. A worker dies with the
process that started it (:func:`die_with_parent`), leaving its cell to be resumed.

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

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.launchers.execute import (
    CellOutcome,
    execute_cell,
    run_then_settle,
    write_failure,
)
from benchmark.launchers.gpu_policy import (
    GIB,
    GpuPlan,
    available_cores,
    calibrated_need_bytes,
    gpu_plan,
    torch_probe,
    visible_index,
)
from benchmark.launchers.options import RunOptions
from benchmark.portable import mode as portable

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

Progress = Callable[["Cell", "CellOutcome"], None]


def default_workers() -> int:
    """On the CPU: one worker per core this process may use (each cell runs on one intra-op
    thread). A run on CUDA takes one per GPU instead (``LocalLauncher.gpu_plan``)."""
    return available_cores()


def by_kernels(cells: Sequence[Cell]) -> list[tuple[str, list[Cell]]]:
    """The cells grouped by kernel mode (``benchmark.portable.mode``), in their order: a process
    runs one mode."""
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        groups.setdefault(cell.kernels, []).append(cell)
    return list(groups.items())


def runs_here(kernels: str) -> bool:
    """Can this process run a cell of ``kernels`` mode (torch not imported yet, or imported in
    that mode)?"""
    return "torch" not in sys.modules or portable.process_kernels() == kernels


# seconds between two looks of a worker at its parent (the watch behind the parent-death signal)
PARENT_POLL_S = 1.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(poll_s: float = PARENT_POLL_S) -> None:
    """Make this worker process end when the process that started it is gone (``run`` killed with
    SIGKILL cannot tell its workers): on Linux the kernel sends it SIGKILL at once
    (``prctl(PR_SET_PDEATHSIG)``); everywhere a daemon thread checks every ``poll_s`` seconds that
    its parent is still its parent and ends the process if not (a worker blocked in a pipe read
    included). Its cell stays claimed by a dead pid, so the next ``run`` takes the claim over and
    resumes the cell from its last round checkpoint (issue 57)."""
    import multiprocessing
    import threading

    # the pid that started us as multiprocessing recorded it (getppid() already names init or a
    # subreaper when the parent died before this line)
    started_by = multiprocessing.parent_process()
    parent = started_by.pid if started_by is not None and started_by.pid else os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl (another libc): the watch below remains
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)  # no cleanup that could block: the claim and checkpoints are on disk

    if os.getppid() != parent:  # gone before the signal was armed
        os._exit(1)
    threading.Thread(target=watch, name="parent watch", daemon=True).start()


def _enter_worker(kernels: str, gpus: Any) -> None:
    """A worker process's initializer: it dies with its parent (:func:`die_with_parent`), enters
    its kernel mode, and on CUDA takes its GPU (one slot of the launcher's queue, as
    ``CUDA_VISIBLE_DEVICES``, before torch is imported)."""
    die_with_parent()
    if gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus.get(timeout=60)
    portable.enter(kernels)


def _run_in_worker(cell: Cell, root: str, options: RunOptions, grid: str | None) -> CellOutcome:
    """The body of a worker task (module-level, so it pickles by reference)."""
    return execute_cell(cell, Path(root), options, grid=grid)


@dataclass(frozen=True, kw_only=True)
class LocalLauncher:
    """Cells in worker processes on this machine (``workers``: 0 = one per core, on CUDA one per
    GPU × ``cells_per_gpu``), or in this process (1)."""

    options: RunOptions = field(default_factory=RunOptions)
    # 0: one per core (default_workers), on CUDA one per GPU x cells_per_gpu; 1: one after another
    # in this process
    workers: int = 0
    # on CUDA: cell processes per GPU, checked against its free memory (benchmark.launchers.
    # gpu_policy); more than 1 needs gpu_mem_per_cell or a calibration of the device
    cells_per_gpu: int = 1
    gpu_mem_per_cell: float = 0.0  # GiB one cell takes on the GPU (0: from the calibration)
    # come back to cells another runner holds, so `run` ends with the grid complete
    wait_claimed: bool = True
    claim_poll_s: float = 2.0

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0 (0: one per core), got {self.workers}")
        if self.cells_per_gpu < 1:
            raise ValueError(f"cells_per_gpu must be >= 1, got {self.cells_per_gpu}")
        if self.gpu_mem_per_cell < 0:
            raise ValueError(f"gpu_mem_per_cell must be >= 0, got {self.gpu_mem_per_cell}")

    def gpu_plan(self, cells: Sequence[Cell], probe: Any = torch_probe) -> GpuPlan | None:
        """Where the cells go on CUDA (None on the CPU): one process per GPU × cells_per_gpu, or
        ``workers`` spread over the GPUs; checked against free memory (``probe``)."""
        if not self.options.on_cuda():
            return None
        import math

        import torch

        from benchmark.records.env_info import machine_model

        count = torch.cuda.device_count()
        per_gpu = self.cells_per_gpu
        if self.workers:
            ngpu = 1 if self.options.device.startswith("cuda:") else max(count, 1)
            per_gpu = math.ceil(self.workers / ngpu)
        need = int(self.gpu_mem_per_cell * GIB) or None
        if need is None and per_gpu > 1:
            need = calibrated_need_bytes(cells, machine_model(self.options.device))
        return gpu_plan(
            self.options.device,
            count=count,
            cells_per_gpu=per_gpu,
            need_bytes=need,
            probe=probe,
            cores=available_cores(),
            threads=self.options.threads,
        )

    def launch(
        self,
        cells: Sequence,
        root: Path,
        *,
        grid: str | None = None,
        progress: Progress | None = None,
    ) -> Iterator[CellOutcome]:
        gpu = self.gpu_plan(cells)
        default = gpu.workers if gpu is not None else default_workers()
        workers = min(self.workers or default, max(len(cells), 1))
        options, slots = self._placed(gpu, workers)
        by_id = {c.cell_id: c for c in cells}

        def emit(outcome: CellOutcome) -> CellOutcome:
            if progress is not None:
                progress(by_id[outcome.cell_id], outcome)
            return outcome

        def run_here(cell: Cell) -> CellOutcome:
            kernels = cell.kernels
            if runs_here(kernels):
                return execute_cell(cell, root, options, grid=grid)
            # a fresh process in the cell's mode
            return next(self._in_pool([cell], root, grid, 1, kernels, options, slots))

        def first() -> Iterator[CellOutcome]:
            for kernels, group in by_kernels(cells):
                if workers > 1 or not runs_here(kernels):
                    n = min(workers, len(group))
                    yield from self._in_pool(group, root, grid, n, kernels, options, slots)
                else:
                    yield from map(run_here, group)

        settled = run_then_settle(
            first(), cells, root, run_here, poll_s=self.claim_poll_s, wait=self.wait_claimed
        )
        try:
            for outcome in settled:
                yield emit(outcome)
        finally:  # a caller that stops listening stops the workers now (see _in_pool), not at GC
            settled.close()

    def _placed(self, gpu: GpuPlan | None, workers: int) -> tuple[RunOptions, list[str] | None]:
        """The options the cells run with and, for worker processes on CUDA, each worker's
        ``CUDA_VISIBLE_DEVICES`` entry (None: the CPU, or the cells run in this process)."""
        if gpu is None:
            return self.options, None
        per_gpu = -(-workers // len(gpu.devices))  # the most cells on one GPU at once
        options = dataclasses.replace(self.options, threads=gpu.threads, concurrency=per_gpu)
        if workers <= 1:
            return options, None
        # a worker sees its one GPU as cuda:0
        slots = [visible_index(d) for d in gpu.slots()]
        return dataclasses.replace(options, device="cuda"), slots

    def _in_pool(
        self,
        cells: Sequence[Cell],
        root: Path,
        grid: str | None,
        workers: int,
        kernels: str = portable.NATIVE,
        options: RunOptions | None = None,
        slots: Sequence[str] | None = None,
    ) -> Iterator[CellOutcome]:
        """Each cell in a worker process, outcomes as cells finish; a worker that dies fails only
        its cell. The workers start in ``kernels`` mode: its variables are in their environment
        before they import torch; on CUDA each takes one GPU slot (``slots``)."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        options = options or self.options
        spawn = multiprocessing.get_context("spawn")
        gpus = None
        if slots:
            gpus = spawn.Queue()
            for slot in list(slots)[:workers]:
                gpus.put(slot)
        with ProcessPoolExecutor(
            max_workers=workers,
            mp_context=spawn,
            initializer=_enter_worker,
            initargs=(kernels, gpus),
        ) as pool:
            # the workers are started (and inherit this environment) while the cells are submitted
            with portable.child_environment(kernels):
                futures = {
                    pool.submit(_run_in_worker, cell, str(root), options, grid): cell
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
            except GeneratorExit:
                # the caller stopped listening (doctor --calibrate's budget): the cells not started
                # are cancelled and the running ones finish before this returns, so that nothing
                # still writes under ``root`` when the caller removes it
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise


__all__ = ["LocalLauncher", "Progress"]
