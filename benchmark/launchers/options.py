"""``RunOptions``: how cells run (device, tracking, data), as one frozen value the CLI,
``run_grid``, every launcher and ``run_cell`` share. None of it is part of a cell's identity: the
same cell under other options is the same cell (except that numbers on a GPU differ from CPU numbers
in their last bits; the record's environment says where it ran).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from benchmark.core.errors import UsageError

DEVICE_HELP = "auto | cpu | cuda | cuda:N"
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_device(device: str) -> None:
    """A device this machine can run, or a UsageError naming the problem (before any cell runs): an
    unknown name, or CUDA asked for where torch sees no GPU (or fewer than the index)."""
    if not _DEVICE.fullmatch(device):
        raise UsageError(f"--device {device!r} is not one of {DEVICE_HELP}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(
                f"--device {device}: torch sees no CUDA device here (torch {torch.__version__}); "
                "use --device cpu or auto"
            )
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise UsageError(
                f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) visible"
            )


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    device: str = "auto"  # DEVICE_HELP; "auto" = CUDA when present
    wandb: bool = False  # log each cell to Weights & Biases (offline without an API key)
    # where datasets live (None: $FSSL_DATA_ROOT or ~/.cache/fssl-bench/data)
    data_root: str | None = None
    # CPU intra-op threads per cell (None: $FSSL_CELL_THREADS, default 1). Float reductions split
    # across threads add in another order, so a cell's numbers depend on this; every launcher pins
    # it and scales with processes.
    threads: int | None = None
    # cells sharing one GPU at once, as the launcher placed them (recorded on a GPU cell: its
    # gpu_hours are its share of the device); set by the local launcher, 1 elsewhere
    concurrency: int = 1

    def __post_init__(self) -> None:
        if not _DEVICE.fullmatch(self.device):
            raise UsageError(f"--device {self.device!r} is not one of {DEVICE_HELP}")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"threads must be >= 1, got {self.threads}")
        if self.concurrency < 1:
            raise UsageError(f"concurrency must be >= 1, got {self.concurrency}")

    def on_cuda(self) -> bool:
        """Whether cells run on a GPU (``cuda``, ``cuda:N``, or ``auto`` where torch sees one)."""
        import torch

        return self.device not in ("cpu", "auto") or (
            self.device == "auto" and torch.cuda.is_available()
        )

    def cell_threads(self) -> int | None:
        """The intra-op thread count a cell runs with: on the CPU ``threads``, else
        $FSSL_CELL_THREADS, default 1; on CUDA ``threads`` when set (the local launcher divides the
        cores between its cell processes, benchmark.launchers.gpu_policy), else None (torch's
        default)."""
        if self.on_cuda():
            return self.threads
        if self.threads is not None:
            return self.threads
        return int(os.environ.get("FSSL_CELL_THREADS", "1")) or None


__all__ = ["DEVICE_HELP", "RunOptions", "check_device"]
