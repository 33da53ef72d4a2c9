"""Round checkpoints: the server state and the round's bookkeeping, the last two rounds kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.engine.client_store import ClientManifest, atomic_torch_save
from benchmark.runroot.rundir import PretrainDir


class Checkpointer:
    """Round checkpoints (server state, comm, client-state manifest) in a pre-training folder's
    checkpoint folder, named by ``PretrainDir``; the last two are kept."""

    def __init__(self, pdir: PretrainDir, every: int = 1, keep: int = 2) -> None:
        if not isinstance(pdir, PretrainDir):
            raise TypeError(
                f"Checkpointer takes the PretrainDir whose checkpoints it keeps, got {pdir!r}"
            )
        self.pdir = pdir
        self.folder = pdir.ckpt
        self.every = max(1, every)
        self.keep = keep

    def rounds(self) -> list[int]:
        return self.pdir.checkpoint_rounds()

    def path(self, round_: int) -> Path:
        return self.pdir.checkpoint(round_)

    def save(self, round_: int, payload: dict[str, Any]) -> None:
        atomic_torch_save(payload, self.path(round_))
        for old in self.rounds()[: -self.keep]:
            self.path(old).unlink(missing_ok=True)

    def load_latest(self) -> dict[str, Any] | None:
        for r in reversed(self.rounds()):
            try:
                return load_round_checkpoint(self.path(r))
            except Exception:  # noqa: BLE001, S112 - torn or refused: the next older one is tried
                continue
        return None

    def manifests(self) -> list[dict[str, Any]]:
        out = []
        for r in self.rounds():
            try:
                # mmap: only the small manifest is read; the model tensors stay on disk (this runs
                # every round)
                out.append(load_round_checkpoint(self.path(r), mmap=True)["clients"])
            except Exception:  # noqa: BLE001, S112 - an unreadable checkpoint names no client files
                continue
        return out


def load_round_checkpoint(path: Path, *, mmap: bool = False) -> dict[str, Any]:
    """A round checkpoint, unpickled as tensors, plain values and the client index only
    (``weights_only=True`` with :class:`ClientManifest` and its int64 arrays allowed): a run folder
    someone sent cannot run code when ``status``, ``submit`` or a resumed run reads it."""
    allowed = [
        ClientManifest,
        np.core.multiarray._reconstruct,
        np.ndarray,
        np.dtype,
        type(np.dtype(np.int64)),
    ]
    with torch.serialization.safe_globals(allowed):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
