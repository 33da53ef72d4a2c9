"""Digests of a simulation's state for ``check-method`` (benchmark.commands.check_method): of tensors,
of a round checkpoint's server and client states, and where two runs' digests first differ. Moved
out of check_method unchanged (the 700-line rule)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def tensor_digest(tensors: Mapping[str, Any]) -> str:
    """sha256 over names, dtypes, shapes and bytes (0-dim tensors included, e.g. optimizer step
    counters)."""
    import hashlib

    import torch

    h = hashlib.sha256()
    for key in sorted(tensors):
        t = tensors[key].detach().cpu().contiguous().reshape(-1)
        h.update(f"{key}|{t.dtype}|{tuple(tensors[key].shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def checkpoint_digests(work_dir: Path, round_: int) -> tuple[str, dict[int, str]]:
    """Server and client-state digests of a simulation's round checkpoint (client states read from
    disk)."""

    from benchmark.engine.checkpoints import load_round_checkpoint
    from benchmark.engine.client_store import ClientStateStore
    from benchmark.runroot.rundir import PretrainDir

    pdir = PretrainDir(Path(work_dir))
    ckpt = load_round_checkpoint(pdir.checkpoint(round_))
    store = ClientStateStore(pdir.states, mem_budget=0)
    store.restore(ckpt["clients"])
    clients = {int(k): client_digest(store.get(int(k))) for k in ckpt["clients"]}
    return tensor_digest(dict(ckpt["model"])) + tensor_digest(dict(ckpt["extra"])), clients


def client_digest(state: Any) -> str:
    return f"{tensor_digest(dict(state.tensors))}@{state.last_round}"


def differing_keys(a: Mapping[Any, str], b: Mapping[Any, str]) -> list[Any]:
    return sorted((k for k in set(a) | set(b) if a.get(k) != b.get(k)), key=str)


def payload_where(key: tuple[int, str, int]) -> str:
    r, direction, k = key
    return f"round {r} broadcast" if direction == "down" else f"round {r} upload of client {k}"


__all__ = [
    "checkpoint_digests",
    "client_digest",
    "differing_keys",
    "payload_where",
    "tensor_digest",
]
