"""The federated round loop, written once (docs/design.md §1.1 step 3, §4.7).

For r = 1..R: sample clients from the (seed, SAMPLING, r) stream; broadcast; ``client_update`` for
each sampled client in client-id order with its own (seed, CLIENT, r, k) stream;
``server_aggregate``; count payload bytes; checkpoint. Client states live in a
:class:`ClientStateStore` (CPU memory with an LRU budget, every state also on disk), so a resumed
run restores them exactly and 100 stateful clients need not fit in RAM at once.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.contracts.method import Method
from benchmark.contracts.types import ClientData, Payload, RoundContext, ServerState
from benchmark.contracts.unlabeled_view import UnlabeledView
from benchmark.core.precision import FP32, Precision, guard_fp16_steps
from benchmark.core.seeding import Stream, np_rng, torch_gen
from benchmark.data.client_views import ClientViews, staged
from benchmark.engine.checkpoints import Checkpointer
from benchmark.engine.client_store import ClientStateStore
from benchmark.runroot.rundir import PretrainDir


def sample_clients(seed: int, round_: int, num_clients: int, per_round: int) -> list[int]:
    """|M_t| = per_round clients without replacement from stream (seed, SAMPLING, round), sorted by
    id."""
    if per_round >= num_clients:
        return list(range(num_clients))
    rng = np_rng(seed, Stream.SAMPLING, round_)
    return sorted(int(k) for k in rng.choice(num_clients, size=per_round, replace=False))


def round_fold(
    method: Method, server: ServerState, sizes: Mapping[int, int], ctx: RoundContext
) -> Any:
    """The method's fold of this round's uploads, or None: a method that can fold its aggregation
    takes each upload as it comes, and the engine then keeps only the uploads' weights and metrics,
    not a model per sampled client (``MethodBase.upload_fold``; optional, so a method not built on
    MethodBase may lack it)."""
    hook = getattr(method, "upload_fold", None)
    return hook(server, sizes, ctx) if hook is not None else None


class ClientSizes(Mapping[int, int]):
    """The sampled clients' numbers of training examples, read when asked (a method that does not
    fold never asks), without gathering a client's data where the views can say it."""

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
        round=round_,
        num_rounds=s.num_rounds,
        client_id=k,
        device=s.device,
        seed=s.seed,
        rng=np_rng(s.seed, Stream.CLIENT, round_, k),
        generator=torch_gen(s.seed, Stream.CLIENT, round_, k),
        local_epochs=s.local_epochs,
        public=public,
        precision=s.precision,
        channels_last=s.channels_last,
        num_classes=s.num_classes,
        num_clients=s.num_clients,
    )


def server_context(s: SimSettings, round_: int, public: Any) -> RoundContext:
    return RoundContext(
        round=round_,
        num_rounds=s.num_rounds,
        client_id=None,
        device=s.device,
        seed=s.seed,
        rng=np_rng(s.seed, Stream.SERVER, round_),
        generator=torch_gen(s.seed, Stream.SERVER, round_),
        local_epochs=s.local_epochs,
        public=public,
        precision=s.precision,
        channels_last=s.channels_last,
        num_classes=s.num_classes,
        num_clients=s.num_clients,
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
    """Run (or resume) the round loop; ``stop_after`` ends early after that round (used by tests and
    requeue).

    The objects that exist before the loop (imported libraries, datasets: ~500k on a typical
    install) are moved to the garbage collector's permanent generation for its duration, so full
    collections stop rescanning them (a 0.3 s stall each, measured in perf/p1); no numbers
    change. No collection first: that would itself be one such stall per call."""
    gc.freeze()
    try:
        # fp16: every optimizer step goes through the loss scaler
        with guard_fp16_steps(settings.precision):
            return _simulate(
                method,
                clients,
                settings,
                work_dir,
                public=public,
                on_round=on_round,
                stop_after=stop_after,
                state_mem_budget=state_mem_budget,
            )
    finally:
        gc.unfreeze()


def round_metrics(
    r: int,
    ups: Mapping[int, Payload],
    server: ServerState,
    *,
    steps: int,
    bytes_up: int,
    bytes_down: int,
    round_s: float,
    client_s: float,
    clients: int,
) -> dict[str, float]:
    """One round's history entry: the mean client loss, traffic, steps and times, the mean of every
    other client metric (``client/<name>``) and the server's own metrics."""
    losses = [p.metrics.get("loss", math.nan) for p in ups.values() if "loss" in p.metrics]
    metrics = {
        "round": float(r),
        "loss": float(np.mean(losses)) if losses else math.nan,
        "clients": float(clients),
        # clients that took an optimizer step (Orchestra's initialisation round trains none): what
        # compute.client_epochs counts
        "clients_trained": float(sum(p.metrics.get("steps", 0) > 0 for p in ups.values())),
        "bytes_up": float(bytes_up),
        "bytes_down": float(bytes_down),
        "client_steps": float(steps),
        "client_samples": float(sum(p.metrics.get("samples", 0) for p in ups.values())),
        "round_time_s": round_s,
        "client_time_s": client_s,
    }
    for key in sorted({k for p in ups.values() for k in p.metrics} - {"loss", "steps", "samples"}):
        vals = [p.metrics[key] for p in ups.values() if key in p.metrics]
        metrics[f"client/{key}"] = float(np.mean(vals))
    for key, value in server.metrics.items():
        metrics[key] = float(value)
    return metrics


def checkpoint_state(
    r: int,
    server: ServerState,
    comm: CommCounter,
    history: list[dict[str, float]],
    client_steps: int,
    store: ClientStateStore,
) -> dict[str, Any]:
    """What a round checkpoint holds (the engine resumes from it bit for bit)."""
    return {
        "round": r,
        "model": dict(server.model),
        "extra": dict(server.extra),
        "comm_up": comm.per_round_up,
        "comm_down": comm.per_round_down,
        "history": history,
        "client_steps": client_steps,
        "clients": store.manifest(),
    }


def resume(
    method: Method, ckpt: Checkpointer, store: ClientStateStore, settings: SimSettings, public: Any
) -> tuple[int, ServerState, CommCounter, list[dict[str, float]], int]:
    """Where the round loop starts: from the latest round checkpoint (its client states restored
    into ``store``), or round 0 with a fresh server state."""
    latest = ckpt.load_latest()
    if latest is None:
        return 0, method.init_server(server_context(settings, 0, public)), CommCounter(), [], 0
    server = ServerState(model=latest["model"], extra=latest["extra"])
    comm = CommCounter(list(latest["comm_up"]), list(latest["comm_down"]))
    store.restore(latest["clients"])
    return int(latest["round"]), server, comm, list(latest["history"]), int(latest["client_steps"])


def _simulate(
    method: Method,
    clients: Sequence[ClientData],
    settings: SimSettings,
    work_dir: Path,
    *,
    public: Any,
    on_round: Callable[[int, dict[str, float]], None] | None,
    stop_after: int | None,
    state_mem_budget: int,
) -> SimulationResult:
    pdir = PretrainDir(Path(work_dir))
    ckpt = Checkpointer(pdir, every=settings.checkpoint_every)
    store = ClientStateStore(pdir.states, mem_budget=state_mem_budget)
    start, server, comm, history, client_steps = resume(method, ckpt, store, settings, public)
    num_clients = len(clients)
    for r in range(start + 1, settings.num_rounds + 1):
        t0 = time.perf_counter()
        selected = sample_clients(settings.seed, r, num_clients, settings.per_round)
        sctx = server_context(settings, r, public)
        down = method.broadcast(server, sctx)
        fold = round_fold(method, server, ClientSizes(clients, selected), sctx)
        ups: dict[int, Payload] = {}
        up_bytes = 0
        # time inside the clients' updates; the rest of round_time_s is the engine's and the
        # server's
        client_s = 0.0
        # on CUDA the next client's data is gathered (pinned) while the current one trains
        for k, data in staged(clients, selected, settings.device):
            state = store.get(k)
            if state is None:
                state = method.init_client(k, server)
            tc = time.perf_counter()
            up, new_state = method.client_update(
                down, state, data, client_context(settings, r, k, public)
            )
            client_s += time.perf_counter() - tc
            store.put(k, new_state, r)
            up_bytes += payload_nbytes(up)
            if fold is not None:
                fold.add(k, up)
                up = Payload({}, num_examples=up.num_examples, metrics=up.metrics)
            ups[k] = up
        server = (
            fold.finish()
            if fold is not None
            else method.server_aggregate(server, ups, sctx, public)
        )
        down_bytes = payload_nbytes(down) * len(selected)
        comm.per_round_up.append(up_bytes)
        comm.per_round_down.append(down_bytes)
        steps = int(sum(p.metrics.get("steps", 0) for p in ups.values()))
        client_steps += steps
        metrics = round_metrics(
            r,
            ups,
            server,
            steps=steps,
            bytes_up=up_bytes,
            bytes_down=down_bytes,
            round_s=time.perf_counter() - t0,
            client_s=client_s,
            clients=len(selected),
        )
        # participations that took no step in a round the method trains in (docs/protocols/
        # small-clients.md): none in a setup round (Orchestra's initialisation) or a reference point
        trains = getattr(method, "pretrains", True) and r > getattr(method, "setup_rounds", 0)
        metrics["clients_without_step"] = float(
            sum(p.metrics.get("steps", 0) == 0 for p in ups.values()) if trains else 0
        )
        history.append(metrics)
        if r % ckpt.every == 0 or r == settings.num_rounds:
            ckpt.save(r, checkpoint_state(r, server, comm, history, client_steps, store))
            store.collect(ckpt.rounds(), ckpt.manifests)
        if on_round is not None:
            on_round(r, metrics)
        if stop_after is not None and r >= stop_after:
            return SimulationResult(server, r, comm, client_steps, history, store)
    return SimulationResult(server, settings.num_rounds, comm, client_steps, history, store)
