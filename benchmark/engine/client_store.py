"""Client states between rounds: in memory under an LRU budget, every state also on disk."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.contracts.types import ClientState
from benchmark.records.files import atomic_replace


def tensors_nbytes(tensors: Mapping[str, torch.Tensor]) -> int:
    return int(sum(t.numel() * t.element_size() for t in tensors.values()))


def state_digest(tensors: Mapping[str, torch.Tensor]) -> str:
    import hashlib

    h = hashlib.sha256()
    for key in sorted(tensors):
        t = tensors[key].detach().cpu().contiguous().reshape(-1)  # 0-dim tensors (counters) too
        h.update(key.encode())
        h.update(str(t.dtype).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` through the one atomic write (records/files.py ``atomic_replace``)."""
    atomic_replace(path, lambda tmp: torch.save(obj, tmp))


class ClientManifest(Mapping[str, Mapping[str, Any]]):
    """The client-state index a checkpoint holds: for each client sampled so far, the round its
    state file was written (-1: an empty state, no file) and its ``last_round`` (-1: None), as three
    int64 arrays (24 bytes a client; never-sampled clients take nothing). Reads as the mapping
    ``{str(k): {"file", "last_round"}}``."""

    __slots__ = ("file_round", "ids", "last_round")

    def __init__(self, ids: np.ndarray, file_round: np.ndarray, last_round: np.ndarray) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        self.file_round = np.asarray(file_round, dtype=np.int64)
        self.last_round = np.asarray(last_round, dtype=np.int64)

    def __getstate__(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.ids, self.file_round, self.last_round

    def __setstate__(self, state: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.ids, self.file_round, self.last_round = state

    def __len__(self) -> int:
        return int(self.ids.size)

    def __iter__(self) -> Iterator[str]:
        return (str(k) for k in self.ids.tolist())

    def __getitem__(self, key: str) -> dict[str, Any]:
        i = int(np.searchsorted(self.ids, int(key)))
        if i >= self.ids.size or self.ids[i] != int(key):
            raise KeyError(key)
        fr, lr = int(self.file_round[i]), int(self.last_round[i])
        return {
            "file": state_file(int(key), fr) if fr >= 0 else None,
            "last_round": lr if lr >= 0 else None,
        }

    def files(self) -> set[str]:
        keep = self.file_round >= 0
        return {
            state_file(k, r)
            for k, r in zip(self.ids[keep].tolist(), self.file_round[keep].tolist())
        }

    @classmethod
    def of(cls, manifest: Mapping[str, Mapping[str, Any]]) -> ClientManifest:
        """From either form (checkpoints written before the arrays held ``{str(k): {"file",
        "last_round"}}``)."""
        if isinstance(manifest, ClientManifest):
            return manifest
        rows = sorted(
            (int(k), _file_round(int(k), v.get("file")), v.get("last_round"))
            for k, v in manifest.items()
        )
        return cls(
            np.array([r[0] for r in rows], dtype=np.int64),
            np.array([r[1] for r in rows], dtype=np.int64),
            np.array([-1 if r[2] is None else int(r[2]) for r in rows], dtype=np.int64),
        )


def state_file(k: int, round_: int) -> str:
    return f"{k}-r{round_}.pt"


def _file_round(k: int, name: str | None) -> int:
    if not name:
        return -1
    m = re.fullmatch(rf"{k}-r(\d+)\.pt", name)
    if m is None:
        raise ValueError(f"client {k}: unexpected state file name {name!r}")
    return int(m.group(1))


UNSEEN = -2  # a registered client never sampled (its index slot holds nothing else)


class ClientStateStore:
    """Per-client state between rounds: kept on the CPU, an LRU of at most ``mem_budget`` bytes in
    memory, and every non-empty state written once to ``folder`` (``<k>-r<round>.pt``) so that
    checkpoints reference files instead of copying states, and evicted states are read back on
    demand.

    Registered clients cost nothing until sampled: the index is two int64 slots per client id seen
    (file round, last round), empty states are not cached, and a state file replaced by a newer one
    is deleted as soon as no kept checkpoint refers to it (``collect``: work in proportion to the
    files replaced, not a scan of the folder)."""

    def __init__(self, folder: Path, mem_budget: int = 512 * 2**20) -> None:
        self.folder = Path(folder)
        self.mem_budget = mem_budget
        self._cache: OrderedDict[int, ClientState] = OrderedDict()
        self._cache_bytes = 0
        # UNSEEN, -1 (empty state) or the file's round
        self._file_round = np.full(0, UNSEEN, dtype=np.int64)
        self._last_round = np.full(0, -1, dtype=np.int64)  # -1: None
        # (round it was replaced in, file) awaiting deletion
        self._replaced: list[tuple[int, str]] = []
        # first collect (and after restore): one scan removes what an interrupted run left
        self._sweep = True
        self.peak_cache_bytes = 0

    def __contains__(self, k: int) -> bool:
        return 0 <= k < self._file_round.size and self._file_round[k] != UNSEEN

    @property
    def cached_clients(self) -> int:
        """How many states are held in memory (empty states never are)."""
        return len(self._cache)

    def get(self, k: int) -> ClientState | None:
        if k in self._cache:
            self._cache.move_to_end(k)
            return self._cache[k]
        if k not in self:
            return None
        fr, lr = int(self._file_round[k]), int(self._last_round[k])
        last_round = lr if lr >= 0 else None
        if fr < 0:
            return ClientState(tensors={}, last_round=last_round)
        tensors = torch.load(self.folder / state_file(k, fr), map_location="cpu", weights_only=True)
        state = ClientState(tensors=tensors, last_round=last_round)
        self._remember(k, state)
        return state

    def put(self, k: int, state: ClientState, round_: int) -> None:
        tensors = {name: t.detach().to("cpu") for name, t in state.tensors.items()}
        state = ClientState(tensors=tensors, last_round=state.last_round)
        self._grow(k + 1)
        old = int(self._file_round[k])
        if old >= 0 and old != round_:
            self._replaced.append((round_, state_file(k, old)))
        if tensors:
            atomic_torch_save(tensors, self.folder / state_file(k, round_))
        self._file_round[k] = round_ if tensors else -1
        self._last_round[k] = -1 if state.last_round is None else int(state.last_round)
        if tensors:
            self._remember(k, state)
        elif k in self._cache:
            self._cache_bytes -= tensors_nbytes(self._cache.pop(k).tensors)

    def _grow(self, size: int) -> None:
        if size <= self._file_round.size:
            return
        cap = max(size, 2 * self._file_round.size, 64)
        self._file_round = np.concatenate(
            [self._file_round, np.full(cap - self._file_round.size, UNSEEN, np.int64)]
        )
        self._last_round = np.concatenate(
            [self._last_round, np.full(cap - self._last_round.size, -1, np.int64)]
        )

    def _remember(self, k: int, state: ClientState) -> None:
        if k in self._cache:
            self._cache_bytes -= tensors_nbytes(self._cache.pop(k).tensors)
        size = tensors_nbytes(state.tensors)
        self._cache[k] = state
        self._cache_bytes += size
        while self._cache_bytes > self.mem_budget and len(self._cache) > 1:
            _, old = self._cache.popitem(last=False)
            self._cache_bytes -= tensors_nbytes(old.tensors)
        self.peak_cache_bytes = max(self.peak_cache_bytes, self._cache_bytes)

    def manifest(self) -> ClientManifest:
        ids = np.flatnonzero(self._file_round != UNSEEN)
        return ClientManifest(ids, self._file_round[ids], self._last_round[ids])

    def restore(self, manifest: Mapping[str, Mapping[str, Any]]) -> None:
        m = ClientManifest.of(manifest)
        size = int(m.ids.max()) + 1 if len(m) else 0
        self._file_round = np.full(size, UNSEEN, dtype=np.int64)
        self._last_round = np.full(size, -1, dtype=np.int64)
        self._file_round[m.ids] = m.file_round
        self._last_round[m.ids] = m.last_round
        self._cache.clear()
        self._cache_bytes = 0
        self._replaced.clear()
        self._sweep = True

    def collect(
        self, kept_rounds: Sequence[int], manifests: Callable[[], Sequence[Mapping[str, Any]]]
    ) -> None:
        """Delete the replaced state files that no kept checkpoint refers to. A file written in
        round a and replaced in round b is referred to by the checkpoints of rounds a..b-1 only;
        every kept checkpoint is at round >= min(kept_rounds), and later ones at rounds >= b, so it
        goes once min(kept_rounds) >= b. After a restore the first call scans the folder once
        (``gc``) for files of the interrupted round."""
        if self._sweep:
            self.gc(manifests())
            self._sweep = False
        oldest = min(kept_rounds, default=None)
        if oldest is None:
            return
        keep = []
        for b, name in self._replaced:
            if b <= oldest:
                (self.folder / name).unlink(missing_ok=True)
            else:
                keep.append((b, name))
        self._replaced = keep

    def gc(self, keep: Sequence[Mapping[str, Mapping[str, Any]]]) -> None:
        """Delete state files referenced neither now nor by the manifests in ``keep`` (a scan of the
        folder)."""
        if not self.folder.exists():
            return
        live = set(self.manifest().files())
        for m in keep:
            live |= ClientManifest.of(m).files()
        for path in self.folder.glob("*.pt"):
            if path.name not in live:
                path.unlink(missing_ok=True)
