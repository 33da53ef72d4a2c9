"""The federated round loop, written once (docs/design.md §1.1 step 3, §4.7).

For r = 1..R: sample clients from the (seed, SAMPLING, r) stream; broadcast; ``client_update`` for each sampled
client in client-id order with its own (seed, CLIENT, r, k) stream; ``server_aggregate``; count payload bytes;
checkpoint. Client states live in a :class:`ClientStateStore` (CPU memory with an LRU budget, every state also on
disk), so a resumed run restores them exactly and 100 stateful clients need not fit in RAM at once.
"""

from __future__ import annotations

import gc
import json
import math
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.data.views import ClientViews, UnlabeledView
from benchmark.method import Method
from benchmark.precision import FP32, Precision, guard_fp16_steps
from benchmark.rundir import PretrainDir
from benchmark.seeding import Stream, np_rng, torch_gen
from benchmark.types import ClientData, ClientState, Payload, RoundContext, ServerState


def sample_clients(seed: int, round_: int, num_clients: int, per_round: int) -> list[int]:
    """|M_t| = per_round clients without replacement from stream (seed, SAMPLING, round), sorted by id."""
    if per_round >= num_clients:
        return list(range(num_clients))
    rng = np_rng(seed, Stream.SAMPLING, round_)
    return sorted(int(k) for k in rng.choice(num_clients, size=per_round, replace=False))


def round_fold(method: Method, server: ServerState, sizes: Mapping[int, int], ctx: RoundContext) -> Any:
    """The method's fold of this round's uploads, or None: a method that can fold its aggregation takes each upload
    as it comes, and the engine then keeps only the uploads' weights and metrics, not a model per sampled client
    (``MethodBase.upload_fold``; optional, so a method not built on MethodBase may lack it)."""
    hook = getattr(method, "upload_fold", None)
    return hook(server, sizes, ctx) if hook is not None else None


class ClientSizes(Mapping[int, int]):
    """The sampled clients' numbers of training examples, read when asked (a method that does not fold never asks),
    without gathering a client's data where the views can say it."""

    def __init__(self, clients: Sequence[ClientData], selected: Sequence[int]) -> None:
        self._clients, self._selected = clients, list(selected)
        self._keys = set(self._selected)

    def __getitem__(self, k: int) -> int:
        if k not in self._keys:
            raise KeyError(k)
        if isinstance(self._clients, ClientViews):
            return self._clients.num_examples(k)
        return int(self._clients[k].num_examples)

    def __iter__(self) -> Iterator[int]:
        return iter(self._selected)

    def __len__(self) -> int:
        return len(self._selected)


def payload_nbytes(p: Payload) -> int:
    return int(sum(t.numel() * t.element_size() for t in p.tensors.values()))


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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


class ClientManifest(Mapping[str, Mapping[str, Any]]):
    """The client-state index a checkpoint holds: for each client sampled so far, the round its state file was
    written (-1: an empty state, no file) and its ``last_round`` (-1: None), as three int64 arrays (24 bytes a
    client; never-sampled clients take nothing). Reads as the mapping ``{str(k): {"file", "last_round"}}``."""

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
        return {"file": state_file(int(key), fr) if fr >= 0 else None, "last_round": lr if lr >= 0 else None}

    def files(self) -> set[str]:
        keep = self.file_round >= 0
        return {state_file(k, r) for k, r in zip(self.ids[keep].tolist(), self.file_round[keep].tolist())}

    @classmethod
    def of(cls, manifest: Mapping[str, Mapping[str, Any]]) -> ClientManifest:
        """From either form (checkpoints written before the arrays held ``{str(k): {"file", "last_round"}}``)."""
        if isinstance(manifest, ClientManifest):
            return manifest
        rows = sorted((int(k), _file_round(int(k), v.get("file")), v.get("last_round")) for k, v in manifest.items())
        return cls(np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.int64),
                   np.array([-1 if r[2] is None else int(r[2]) for r in rows], dtype=np.int64))


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
    """Per-client state between rounds: kept on the CPU, an LRU of at most ``mem_budget`` bytes in memory, and
    every non-empty state written once to ``folder`` (``<k>-r<round>.pt``) so that checkpoints reference files
    instead of copying states, and evicted states are read back on demand.

    Registered clients cost nothing until sampled: the index is two int64 slots per client id seen (file round,
    last round), empty states are not cached, and a state file replaced by a newer one is deleted as soon as no kept
    checkpoint refers to it (``collect``: work in proportion to the files replaced, not a scan of the folder)."""

    def __init__(self, folder: Path, mem_budget: int = 512 * 2**20) -> None:
        self.folder = Path(folder)
        self.mem_budget = mem_budget
        self._cache: OrderedDict[int, ClientState] = OrderedDict()
        self._cache_bytes = 0
        self._file_round = np.full(0, UNSEEN, dtype=np.int64)  # UNSEEN, -1 (empty state) or the file's round
        self._last_round = np.full(0, -1, dtype=np.int64)  # -1: None
        self._replaced: list[tuple[int, str]] = []  # (round it was replaced in, file) awaiting deletion
        self._sweep = True  # first collect (and after restore): one scan removes what an interrupted run left
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
        self._file_round = np.concatenate([self._file_round, np.full(cap - self._file_round.size, UNSEEN, np.int64)])
        self._last_round = np.concatenate([self._last_round, np.full(cap - self._last_round.size, -1, np.int64)])

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

    def collect(self, kept_rounds: Sequence[int], manifests: Callable[[], Sequence[Mapping[str, Any]]]) -> None:
        """Delete the replaced state files that no kept checkpoint refers to. A file written in round a and
        replaced in round b is referred to by the checkpoints of rounds a..b-1 only; every kept checkpoint is at
        round >= min(kept_rounds), and later ones at rounds >= b, so it goes once min(kept_rounds) >= b. After a
        restore the first call scans the folder once (``gc``) for files of the interrupted round."""
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
        """Delete state files referenced neither now nor by the manifests in ``keep`` (a scan of the folder)."""
        if not self.folder.exists():
            return
        live = set(self.manifest().files())
        for m in keep:
            live |= ClientManifest.of(m).files()
        for path in self.folder.glob("*.pt"):
            if path.name not in live:
                path.unlink(missing_ok=True)


@dataclass
class CommCounter:
    per_round_up: list[int] = field(default_factory=list)
    per_round_down: list[int] = field(default_factory=list)

    @property
    def bytes_up(self) -> int:
        return int(sum(self.per_round_up))

    @property
    def bytes_down(self) -> int:
        return int(sum(self.per_round_down))


class Checkpointer:
    """Round checkpoints (server state, comm, client-state manifest) in a pre-training folder's checkpoint folder,
    named by ``PretrainDir``; the last two are kept."""

    def __init__(self, pdir: PretrainDir, every: int = 1, keep: int = 2) -> None:
        if not isinstance(pdir, PretrainDir):
            raise TypeError(f"Checkpointer takes the PretrainDir whose checkpoints it keeps, got {pdir!r}")
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
                # mmap: only the small manifest is read; the model tensors stay on disk (this runs every round)
                out.append(load_round_checkpoint(self.path(r), mmap=True)["clients"])
            except Exception:  # noqa: BLE001, S112 - an unreadable checkpoint names no client files
                continue
        return out


def load_round_checkpoint(path: Path, *, mmap: bool = False) -> dict[str, Any]:
    """A round checkpoint, unpickled as tensors, plain values and the client index only
    (``weights_only=True`` with :class:`ClientManifest` and its int64 arrays allowed): a run folder
    someone sent cannot run code when ``status``, ``submit`` or a resumed run reads it."""
    allowed = [ClientManifest, np.core.multiarray._reconstruct, np.ndarray, np.dtype,
               type(np.dtype(np.int64))]
    with torch.serialization.safe_globals(allowed):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


@dataclass
class SimulationResult:
    server: ServerState
    rounds_completed: int
    comm: CommCounter
    client_steps: int
    history: list[dict[str, float]]
    store: ClientStateStore


@dataclass(frozen=True)
class SimSettings:
    seed: int
    num_rounds: int
    local_epochs: int
    per_round: int
    device: torch.device
    precision: Precision = FP32
    channels_last: bool = False
    checkpoint_every: int = 1
    num_classes: int = 0
    num_clients: int = 0  # K registered clients, passed to the methods in every context


def client_context(s: SimSettings, round_: int, k: int, public: Any) -> RoundContext:
    return RoundContext(
        round=round_, num_rounds=s.num_rounds, client_id=k, device=s.device, seed=s.seed,
        rng=np_rng(s.seed, Stream.CLIENT, round_, k), generator=torch_gen(s.seed, Stream.CLIENT, round_, k),
        local_epochs=s.local_epochs, public=public, precision=s.precision, channels_last=s.channels_last,
        num_classes=s.num_classes, num_clients=s.num_clients,
    )


def server_context(s: SimSettings, round_: int, public: Any) -> RoundContext:
    return RoundContext(
        round=round_, num_rounds=s.num_rounds, client_id=None, device=s.device, seed=s.seed,
        rng=np_rng(s.seed, Stream.SERVER, round_), generator=torch_gen(s.seed, Stream.SERVER, round_),
        local_epochs=s.local_epochs, public=public, precision=s.precision, channels_last=s.channels_last,
        num_classes=s.num_classes, num_clients=s.num_clients,
    )


def simulate(
    method: Method,
    clients: Sequence[ClientData],
    settings: SimSettings,
    work_dir: Path,
    *,
    public: UnlabeledView | None = None,
    on_round: Callable[[int, dict[str, float]], None] | None = None,
    stop_after: int | None = None,
    state_mem_budget: int = 256 * 2**20,  # P4: 100 stateful clients within 1.5x the peak RAM of 10
) -> SimulationResult:
    """Run (or resume) the round loop; ``stop_after`` ends early after that round (used by tests and requeue).

    The objects that exist before the loop (imported libraries, datasets: ~500k on a typical install) are moved to
    the garbage collector's permanent generation for its duration, so full collections stop rescanning them (a
    0.3 s stall each, measured in benchmarks/p1); no numbers change. No collection first: that would itself be one
    such stall per call."""
    gc.freeze()
    try:
        with guard_fp16_steps(settings.precision):  # fp16: every optimizer step goes through the loss scaler
            return _simulate(method, clients, settings, work_dir, public=public, on_round=on_round,
                             stop_after=stop_after, state_mem_budget=state_mem_budget)
    finally:
        gc.unfreeze()


def _simulate(method: Method, clients: Sequence[ClientData], settings: SimSettings, work_dir: Path, *, public: Any,
              on_round: Callable[[int, dict[str, float]], None] | None, stop_after: int | None,
              state_mem_budget: int) -> SimulationResult:
    pdir = PretrainDir(Path(work_dir))
    ckpt = Checkpointer(pdir, every=settings.checkpoint_every)
    store = ClientStateStore(pdir.states, mem_budget=state_mem_budget)
    comm = CommCounter()
    history: list[dict[str, float]] = []
    client_steps = 0
    latest = ckpt.load_latest()
    if latest is not None:
        start = int(latest["round"])
        server = ServerState(model=latest["model"], extra=latest["extra"])
        comm = CommCounter(list(latest["comm_up"]), list(latest["comm_down"]))
        history = list(latest["history"])
        client_steps = int(latest["client_steps"])
        store.restore(latest["clients"])
    else:
        start = 0
        server = method.init_server(server_context(settings, 0, public))
    num_clients = len(clients)
    for r in range(start + 1, settings.num_rounds + 1):
        t0 = time.perf_counter()
        selected = sample_clients(settings.seed, r, num_clients, settings.per_round)
        sctx = server_context(settings, r, public)
        down = method.broadcast(server, sctx)
        fold = round_fold(method, server, ClientSizes(clients, selected), sctx)
        ups: dict[int, Payload] = {}
        up_bytes = 0
        client_s = 0.0  # time inside the clients' updates; the rest of round_time_s is the engine's and the server's
        for k in selected:
            state = store.get(k)
            if state is None:
                state = method.init_client(k, server)
            tc = time.perf_counter()
            up, new_state = method.client_update(down, state, clients[k], client_context(settings, r, k, public))
            client_s += time.perf_counter() - tc
            store.put(k, new_state, r)
            up_bytes += payload_nbytes(up)
            if fold is not None:
                fold.add(k, up)
                up = Payload({}, num_examples=up.num_examples, metrics=up.metrics)
            ups[k] = up
        server = fold.finish() if fold is not None else method.server_aggregate(server, ups, sctx, public)
        down_bytes = payload_nbytes(down) * len(selected)
        comm.per_round_up.append(up_bytes)
        comm.per_round_down.append(down_bytes)
        losses = [p.metrics.get("loss", math.nan) for p in ups.values() if "loss" in p.metrics]
        steps = int(sum(p.metrics.get("steps", 0) for p in ups.values()))
        client_steps += steps
        metrics = {
            "round": float(r),
            "loss": float(np.mean(losses)) if losses else math.nan,
            "clients": float(len(selected)),
            "bytes_up": float(up_bytes),
            "bytes_down": float(down_bytes),
            "client_steps": float(steps),
            "round_time_s": time.perf_counter() - t0,
            "client_time_s": client_s,
        }
        for key in sorted({k for p in ups.values() for k in p.metrics} - {"loss", "steps"}):
            vals = [p.metrics[key] for p in ups.values() if key in p.metrics]
            metrics[f"client/{key}"] = float(np.mean(vals))
        for key, value in server.metrics.items():
            metrics[key] = float(value)
        history.append(metrics)
        if r % ckpt.every == 0 or r == settings.num_rounds:
            ckpt.save(r, {
                "round": r, "model": dict(server.model), "extra": dict(server.extra),
                "comm_up": comm.per_round_up, "comm_down": comm.per_round_down, "history": history,
                "client_steps": client_steps, "clients": store.manifest(),
            })
            store.collect(ckpt.rounds(), ckpt.manifests)
        if on_round is not None:
            on_round(r, metrics)
        if stop_after is not None and r >= stop_after:
            return SimulationResult(server, r, comm, client_steps, history, store)
    return SimulationResult(server, settings.num_rounds, comm, client_steps, history, store)


def write_json(path: Path, obj: Any) -> None:
    from benchmark.records.files import atomic_write_text

    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
