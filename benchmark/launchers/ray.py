"""Ray launcher: one ``ray.remote`` task per cell, results streamed with ``ray.wait`` as cells
finish.

Ray core, not Tune (docs/design.md §6): the grid is exhaustive and the results tree is ours. Each
task is ``execute_cell`` with the cell's resources (``num_cpus``/``num_gpus``); Ray retries a task
whose worker died (``max_retries``: a node lost, the OOM killer) and the retried task resumes from
the cell's latest round checkpoint. A task that still cannot finish is failed with its reason
written to the cell's ``run directory`` (the worker could not write it: it was killed), and the grid
goes on. ``ray`` is imported lazily (registered as a lazy target).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.core.paths import REPO
from benchmark.launchers.execute import (
    CellOutcome,
    execute_cell,
    run_then_settle,
    write_failure,
)
from benchmark.launchers.gpu_policy import cluster_gpus
from benchmark.launchers.local import Progress
from benchmark.launchers.options import RunOptions
from benchmark.portable.mode import environment

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell


def _run_remote(cell: Cell, root: str, options: RunOptions, grid: str | None) -> CellOutcome:
    """The body of the Ray task (module-level, so it pickles by reference)."""
    return execute_cell(cell, Path(root), options, grid=grid, owner=None)


def kernel_env(cell: Cell) -> dict[str, Any]:
    """The task's runtime_env: the variables of the cell's kernel mode (benchmark.portable.mode),
    so that its worker process starts in that mode (Ray merges them with the job's env_vars and
    keeps one worker pool per env)."""
    env = environment(cell.kernels)
    return {"env_vars": {k: v for k, v in env.items() if v is not None}}


@dataclass(frozen=True, kw_only=True)
class RayLauncher:
    # None: start a local cluster (no dashboard); "auto" or ray://host:port: join one
    address: str | None = None
    cpus_per_cell: float = 1.0
    gpus_per_cell: float = 0.0
    # re-runs of a task whose worker died; each retry resumes from the latest checkpoint
    max_retries: int = 2
    num_cpus: int | None = None  # size of a local cluster (None: all cores)
    options: RunOptions = field(default_factory=RunOptions)
    claim_poll_s: float = 2.0
    shutdown: bool = True  # shut down a cluster this launcher started, when the grid ends

    def _init(self) -> bool:
        """Connect (or start a local cluster); True if this call started Ray."""
        import ray

        if ray.is_initialized():
            return False
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        # the cell code is imported from this checkout on every worker (local cluster: same file
        # system)
        repo = str(REPO)
        env = {
            "env_vars": {
                "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])),
                "RAY_USAGE_STATS_ENABLED": "0",
            }
        }
        if self.address is None:
            ray.init(
                num_cpus=self.num_cpus,
                include_dashboard=False,
                runtime_env=env,
                log_to_driver=False,
            )
        else:
            ray.init(address=self.address, runtime_env=env, log_to_driver=False)
        return True

    def launch(
        self,
        cells: Sequence,
        root: Path,
        *,
        grid: str | None = None,
        progress: Progress | None = None,
    ) -> Iterator[CellOutcome]:
        import ray

        root = Path(root).resolve()
        started = self._init()
        # on CUDA: a GPU per cell unless asked otherwise, threads = the cores it reserves; Ray shows
        # a task only its own GPUs (CUDA_VISIBLE_DEVICES), so the cell asks for "cuda"
        # "auto" asks the cluster, not this (head or login) machine, whether there are GPUs
        on_cuda = (
            bool(ray.cluster_resources().get("GPU", 0))
            if self.options.device == "auto"
            else self.options.on_cuda()
        )
        gpus = cluster_gpus(on_cuda, self.gpus_per_cell, self.cpus_per_cell)
        options = self.options
        if gpus.threads is not None:
            options = dataclasses.replace(
                options,
                device="cuda",
                threads=options.threads or gpus.threads,
                concurrency=gpus.concurrency,
            )
        task = ray.remote(
            num_cpus=self.cpus_per_cell,
            num_gpus=gpus.gpus_per_cell,
            max_retries=self.max_retries,
            retry_exceptions=False,
        )(_run_remote)
        by_id = {c.cell_id: c for c in cells}

        def emit(outcome: CellOutcome) -> CellOutcome:
            if progress is not None:
                progress(by_id[outcome.cell_id], outcome)
            return outcome

        def run_all(batch: Sequence[Cell]) -> Iterator[CellOutcome]:
            refs = {
                task.options(runtime_env=kernel_env(c)).remote(c, str(root), options, grid): c
                for c in batch
            }
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    cell = refs[ref]
                    try:
                        yield ray.get(ref)
                    except ray.exceptions.RayError as exc:  # the worker died max_retries + 1 times
                        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
                        write_failure(cell, root, reason)
                        yield CellOutcome(cell.cell_id, "failed", error=reason)

        def run_one(cell: Cell) -> CellOutcome:
            return next(run_all([cell]))

        try:
            settled = run_then_settle(
                run_all(cells), cells, root, run_one, poll_s=self.claim_poll_s
            )
            for outcome in settled:
                yield emit(outcome)
        finally:
            if started and self.shutdown:
                ray.shutdown()
