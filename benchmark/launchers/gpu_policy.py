"""How the local launcher places cells on GPUs: one cell process per visible GPU by default, or
``cells_per_gpu`` of them where the GPU's free memory holds that many, each process pinned to its
GPU (``CUDA_VISIBLE_DEVICES``) and given its share of the CPU cores as intra-op threads.

Pure functions of what they are given (the device option, the GPU count, a free-memory probe, the
cores), so the policy is tested on a machine without a GPU by handing it a probe
(tests/benchmark/launchers/test_gpu_policy.py). The launcher hands it ``torch.cuda.mem_get_info``.

**Memory.** More than one cell per GPU needs to know what a cell takes: ``gpu_mem_per_cell`` (GiB)
when given, else the largest peak device memory the device's calibration measured for the grid's
pre-training configurations (``doctor --calibrate``; ``benchmark.calibration.projection``), with
:data:`HEADROOM` on top (the evaluation, the allocator's fragmentation). Every GPU the cells would
use must have ``cells_per_gpu`` × that free, or the run stops before any cell starts with a
UsageError naming the GPU, its free memory and what was asked. One cell per GPU is always allowed:
it is what a plain ``run`` does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchmark.core.errors import UsageError

MemProbe = Callable[[int], tuple[int, int]]  # CUDA index -> (free, total) bytes
HEADROOM = 1.25  # what a cell takes beyond its measured pre-training peak
GIB = 1 << 30


@dataclass(frozen=True)
class GpuPlan:
    """Where the cell processes of one launch go."""

    devices: tuple[int, ...]  # the CUDA indices used (in this process's numbering)
    cells_per_gpu: int
    threads: int  # CPU intra-op threads per cell process

    @property
    def workers(self) -> int:
        return len(self.devices) * self.cells_per_gpu

    def slots(self) -> list[int]:
        """One CUDA index per worker process, the GPUs taken in turn."""
        return [d for _ in range(self.cells_per_gpu) for d in self.devices]


def cuda_devices(device: str, count: int) -> tuple[int, ...]:
    """The GPUs a run on ``device`` uses: ``cuda:N`` that one, ``cuda``/``auto`` every visible
    one."""
    if count < 1:
        raise UsageError(f"--device {device}: torch sees no CUDA device here")
    if device.startswith("cuda:"):
        index = int(device.split(":")[1])
        if index >= count:
            raise UsageError(f"--device {device}: only {count} CUDA device(s) visible")
        return (index,)
    return tuple(range(count))


def check_free_memory(
    devices: Sequence[int], cells_per_gpu: int, need_bytes: int | None, probe: MemProbe
) -> None:
    """UsageError unless every GPU of ``devices`` has ``cells_per_gpu`` × ``need_bytes`` free
    (``need_bytes`` None: unknown, so only one cell per GPU is allowed)."""
    if cells_per_gpu == 1:
        return
    if not need_bytes:
        raise UsageError(
            f"--cells-per-gpu {cells_per_gpu}: what one cell takes on the GPU is not known; pass "
            "--gpu-mem-per-cell GIB, or calibrate this device first (python -m benchmark doctor "
            "--calibrate measures each configuration's peak memory)"
        )
    want = cells_per_gpu * need_bytes
    for index in devices:
        free, total = probe(index)
        if free < want:
            raise UsageError(
                f"--cells-per-gpu {cells_per_gpu}: GPU {index} has {free / GIB:.1f} GiB free of "
                f"{total / GIB:.1f} GiB, and {cells_per_gpu} cells of {need_bytes / GIB:.1f} GiB "
                f"each (peak x {HEADROOM} headroom) need {want / GIB:.1f} GiB; use fewer cells "
                "per GPU"
            )


def cell_threads(cores: int, workers: int, asked: int | None = None) -> int:
    """Intra-op threads per cell process: ``asked`` when given, else the cores shared out."""
    if asked is not None:
        return asked
    return max(1, cores // max(1, workers))


def gpu_plan(
    device: str,
    *,
    count: int,
    cells_per_gpu: int,
    need_bytes: int | None,
    probe: MemProbe,
    cores: int,
    threads: int | None = None,
) -> GpuPlan:
    """The placement of one launch's cell processes (module docstring), checked against free
    memory."""
    if cells_per_gpu < 1:
        raise UsageError(f"--cells-per-gpu must be >= 1, got {cells_per_gpu}")
    devices = cuda_devices(device, count)
    check_free_memory(devices, cells_per_gpu, need_bytes, probe)
    workers = len(devices) * cells_per_gpu
    return GpuPlan(devices, cells_per_gpu, cell_threads(cores, workers, threads))


@dataclass(frozen=True)
class ClusterGpus:
    """What a cluster launcher (Ray, SLURM) asks the scheduler for per cell on CUDA, and the cell's
    recorded share: the scheduler, not this process, places the cells on GPUs."""

    gpus_per_cell: float  # Ray's num_gpus (fractional: several cells per GPU); SLURM's GPUs a job
    threads: int | None  # CPU intra-op threads a cell runs with (None: the CPU's rule, unchanged)
    concurrency: int  # cells sharing one GPU at most (recorded with each cell's device time)


def cluster_gpus(on_cuda: bool, gpus_per_cell: float, cpus_per_cell: float) -> ClusterGpus:
    """The GPU policy of a cluster launcher: on CUDA a cell that asks for no GPU gets one (as a
    plain local ``run`` gives each cell process its GPU: a scheduler told 0 would pack every cell
    onto one GPU, or hide the GPUs from it), its CPU threads are the cores it reserves, and a
    fractional request records how many cells may share a GPU. On the CPU nothing changes (the
    thread count is part of a CPU cell's numbers)."""
    if gpus_per_cell < 0:
        raise UsageError(f"gpus per cell must be >= 0, got {gpus_per_cell}")
    if not on_cuda:
        return ClusterGpus(gpus_per_cell, None, 1)
    gpus = gpus_per_cell or 1.0
    # 1/gpus in floating point is just under an integer for 0.1, 0.2, ... (1.0 // 0.1 == 9.0)
    per_gpu = max(1, math.floor(1.0 / gpus + 1e-9)) if gpus < 1 else 1
    return ClusterGpus(gpus, max(1, int(cpus_per_cell)), per_gpu)


def visible_index(index: int, environ: dict[str, str] | None = None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry that pins a child process to this process's CUDA device
    ``index`` (this process may itself see a subset of the machine's GPUs)."""
    env = os.environ if environ is None else environ
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[index] if index < len(visible) else str(index)


def calibrated_need_bytes(cells: Sequence[object], device_name: str) -> int | None:
    """The largest peak device memory the device's calibration measured for ``cells``' pre-training
    configurations (own key or family), × HEADROOM; None when no calibration measured any."""
    from benchmark.calibration.projection import usable_calibration

    calibration, _ = usable_calibration(device_name)
    if calibration is None:
        return None
    peaks = []
    for cell in cells:
        m, _basis = calibration.lookup(cell)  # type: ignore[arg-type]
        if m is not None and m.peak_mem_bytes:
            peaks.append(int(m.peak_mem_bytes))
    return int(max(peaks) * HEADROOM) if peaks else None


def torch_probe(index: int) -> tuple[int, int]:
    """``torch.cuda.mem_get_info`` of CUDA device ``index``: (free, total) bytes."""
    import torch

    free, total = torch.cuda.mem_get_info(index)
    return int(free), int(total)


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


__all__ = [
    "GIB",
    "HEADROOM",
    "ClusterGpus",
    "GpuPlan",
    "MemProbe",
    "available_cores",
    "calibrated_need_bytes",
    "cell_threads",
    "check_free_memory",
    "cluster_gpus",
    "cuda_devices",
    "gpu_plan",
    "torch_probe",
    "visible_index",
]
