"""SLURM through submitit: the grid as one job array, requeued on preemption or timeout
(docs/design.md §6, submitit).

Each array task runs ``CellJob(cell)``, a ``submitit.helpers.Checkpointable``. When SLURM signals a
timeout or a preemption, submitit calls ``CellJob.checkpoint``; nothing needs saving there, because
``run_cell`` checkpoints every round under ``_pretrain/<pretrain_key>/ckpt`` and scores per task, so
the job just resubmits itself and the requeued task resumes the cell from its latest round
checkpoint (up to ``max_num_timeout`` timeouts; preemptions do not count). The cell claim is owned
by the submitit job id, which survives requeue, so the requeued task takes its own claim back at
once instead of waiting for the heartbeat timeout.

``cluster="local"`` (one process per job on this machine) and ``cluster="debug"`` (in this process,
sequentially) run the same code path without SLURM; tests use both. ``submitit`` is imported lazily
(lazy registry target). A job is a fresh process: ``execute_cell`` puts it in the cell's kernel
mode before torch is imported (benchmark.portable.mode); ``debug`` runs in this process, so a cell
of another mode than this process's fails there with the reason.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import submitit

from benchmark.core.errors import UsageError
from benchmark.launchers.execute import (
    CellOutcome,
    execute_cell,
    run_then_settle,
    write_failure,
)
from benchmark.launchers.gpu_policy import ClusterGpus, cluster_gpus
from benchmark.launchers.local import Progress
from benchmark.launchers.options import RunOptions

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell


def job_owner() -> str | None:
    """``submitit:<job id>`` inside a submitit job (the id survives requeue), None elsewhere."""
    try:
        return f"submitit:{submitit.JobEnvironment().job_id}"
    except RuntimeError:  # not inside a submitit job
        return None


class CellJob(submitit.helpers.Checkpointable):
    """The picklable array task: run (or resume) one cell; on timeout/preemption, requeue itself."""

    def __init__(self, root: str, options: RunOptions, *, grid: str | None = None) -> None:
        self.root = str(root)
        self.options = options
        self.grid = grid
        # how many times this job was requeued (for logs; numbers never depend on it)
        self.attempt = 0

    def __call__(self, cell: Cell) -> CellOutcome:
        print(f"cell {cell.cell_id} attempt {self.attempt} ({cell.label()})", flush=True)
        return execute_cell(
            cell,
            Path(self.root),
            self.options,
            grid=self.grid,
            owner=job_owner(),
            on_round=self.on_round,
        )

    def on_round(self, round_: int, metrics: Mapping[str, float]) -> None:
        """Called after each pre-training round (the round checkpoint is on disk by then)."""
        print(f"round {round_} done", flush=True)

    def checkpoint(self, cell: Cell) -> submitit.helpers.DelayedSubmission:
        # The round checkpoints already on disk are the job's state; resubmit the same call, which
        # resumes.
        self.attempt += 1
        print(f"checkpoint: requeueing cell {cell.cell_id} (attempt {self.attempt})", flush=True)
        return submitit.helpers.DelayedSubmission(self, cell)


@dataclass(frozen=True, kw_only=True)
class SubmititLauncher:
    folder: str | None = None  # submitit logs and pickles (default: <root>/_submitit)
    cluster: str | None = None  # slurm | local | debug (None: slurm if available, else local)
    partition: str | None = None
    timeout_min: int = 60 * 24
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    mem_gb: float | None = None
    # at most this many cells at once (SLURM: %N in the array; local: our window)
    array_parallelism: int = 32
    max_num_timeout: int = 3  # requeues after a timeout (preemptions are not counted)
    # e.g. {"account": "...", "qos": "..."}
    slurm_additional: Mapping[str, Any] = field(default_factory=dict)
    options: RunOptions = field(default_factory=RunOptions)
    poll_s: float = 2.0
    # tests substitute a subclass (e.g. one that waits for the timeout signal)
    job_class: type = CellJob

    def executor(self, root: Path) -> submitit.AutoExecutor:
        folder = Path(self.folder) if self.folder else Path(root) / "_submitit"
        ex = submitit.AutoExecutor(
            folder=folder / "%j",
            cluster=self.cluster,
            slurm_max_num_timeout=self.max_num_timeout,
            local_max_num_timeout=self.max_num_timeout,
        )
        params: dict[str, Any] = {
            "timeout_min": self.timeout_min,
            "name": "fssl-bench",
            "slurm_array_parallelism": self.array_parallelism,
        }
        if ex.cluster != "debug":
            gpus = self._gpus().gpus_per_cell
            params.update(gpus_per_node=int(gpus), cpus_per_task=self.cpus_per_task)
        if self.mem_gb is not None:
            params["mem_gb"] = self.mem_gb
        if self.partition:
            params["slurm_partition"] = self.partition
        if self.slurm_additional:
            params["slurm_additional_parameters"] = dict(self.slurm_additional)
        ex.update_parameters(**params)
        return ex

    def _on_cuda(self) -> bool:
        """Whether the cells run on GPUs: ``cuda``/``cuda:N``, or ``auto`` with GPUs asked for (the
        machine that submits, a login node, may have none)."""
        if self.options.device == "auto":
            return self.gpus_per_node > 0 or self.options.on_cuda()
        return self.options.on_cuda()

    def _gpus(self) -> ClusterGpus:
        """On CUDA a job gets one GPU unless ``gpus_per_node`` says more (a job is one cell), and
        its cell runs with the job's cores as threads (benchmark.launchers.gpu_policy)."""
        return cluster_gpus(self._on_cuda(), float(self.gpus_per_node), self.cpus_per_task)

    def job_options(self) -> RunOptions:
        """The options each cell job runs with: on CUDA the job's GPU (SLURM shows a job only its
        own, so the cell asks for "cuda") and its cores as threads."""
        gpus = self._gpus()
        if gpus.threads is None:
            return self.options
        return dataclasses.replace(
            self.options, device="cuda", threads=self.options.threads or gpus.threads
        )

    def launch(
        self,
        cells: Sequence,
        root: Path,
        *,
        grid: str | None = None,
        progress: Progress | None = None,
    ) -> Iterator[CellOutcome]:
        root = Path(root).resolve()
        ex = self.executor(root)
        if ex.cluster != "slurm" and self._on_cuda():
            # submitit's local executor shows every job GPU 0 and its debug executor runs the jobs
            # in this process: neither places cells on GPUs
            raise UsageError(
                f"the submitit {ex.cluster} executor does not place cells on GPUs; on this machine "
                "use the local launcher (one cell process per GPU), or --device cpu"
            )
        job = self.job_class(str(root), self.job_options(), grid=grid)
        by_id = {c.cell_id: c for c in cells}

        def emit(outcome: CellOutcome) -> CellOutcome:
            if progress is not None:
                progress(by_id[outcome.cell_id], outcome)
            return outcome

        def result(cell: Cell, j: Any) -> CellOutcome:
            try:
                return j.result()
            except Exception as exc:  # noqa: BLE001 - timed out too often, cancelled, node failure
                reason = (
                    f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
                )
                reason += f" (submitit job {j.job_id}; logs in {j.paths.folder})"
                write_failure(cell, root, reason)
                return CellOutcome(cell.cell_id, "failed", error=reason)

        def run_all(batch: Sequence[Cell]) -> Iterator[CellOutcome]:
            if ex.cluster == "slurm":  # SLURM enforces the parallelism limit on the array itself
                window = len(batch)
            # DEVIATION: the local/debug executors ignore array parallelism; we keep a window
            # instead
            else:
                window = max(1, self.array_parallelism)
            queue = list(batch)
            running: list[tuple[Any, Any]] = []
            while queue or running:
                if queue and len(running) < window:
                    take, queue = queue[: window - len(running)], queue[window - len(running) :]
                    jobs = ex.map_array(job, take)
                    running.extend(zip(take, jobs))
                    continue
                finished = [(c, j) for c, j in running if j.done()]
                if not finished:
                    time.sleep(self.poll_s)
                    continue
                for c, j in finished:
                    running.remove((c, j))
                    yield result(c, j)

        def run_one(cell: Cell) -> CellOutcome:
            return next(run_all([cell]))

        for outcome in run_then_settle(run_all(cells), cells, root, run_one, poll_s=self.poll_s):
            yield emit(outcome)
