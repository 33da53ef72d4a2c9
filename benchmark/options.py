"""``RunOptions``: how cells run (device, tracking, data), as one frozen value the CLI, ``run_grid``, every launcher
and ``run_cell`` share. None of it is part of a cell's identity: the same cell under other options is the same cell
(except that numbers on a GPU differ from CPU numbers in their last bits; the record's environment says where it ran).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEVICE_HELP = "auto | cpu | cuda | cuda:N"


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    device: str = "auto"  # DEVICE_HELP; "auto" = CUDA when present
    wandb: bool = False  # log each cell to Weights & Biases (offline without an API key)
    data_root: str | None = None  # where datasets live (None: $FSSL_DATA_ROOT or ~/.cache/fssl-bench/data)
    # CPU intra-op threads per cell (None: $FSSL_CELL_THREADS, default 1). Float reductions split across threads
    # add in another order, so a cell's numbers depend on this; every launcher pins it and scales with processes.
    threads: int | None = None

    def cell_threads(self) -> int | None:
        """The intra-op thread count a CPU cell runs with (None on CUDA: the GPU kernels decide)."""
        import torch

        if self.device not in ("cpu", "auto") or (self.device == "auto" and torch.cuda.is_available()):
            return None
        if self.threads is not None:
            return self.threads
        return int(os.environ.get("FSSL_CELL_THREADS", "1")) or None


__all__ = ["DEVICE_HELP", "RunOptions"]
