"""The round loop's client-state store and checkpoints at cross-device scale (issue 23, P7):
registered clients cost nothing until sampled, states are reloaded lazily, replaced state files are
deleted once no kept checkpoint refers to them, and a checkpoint's size follows the clients sampled,
not the clients registered."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.contracts.types import ClientState, Payload, ServerState
from benchmark.engine.checkpoints import Checkpointer
from benchmark.engine.client_store import ClientManifest, ClientStateStore
from benchmark.engine.rounds import SimSettings, simulate
from benchmark.runroot.rundir import PretrainDir


class Counting:
    """A minimal method: the server holds one vector, each client adds its id; ``stateful`` clients
    keep a counter tensor (how often they were sampled), stateless ones an empty state."""

    def __init__(self, stateful: bool) -> None:
        self.stateful = stateful

    def init_server(self, ctx) -> ServerState:
        return ServerState(model={"w": torch.zeros(4)})

    def broadcast(self, server: ServerState, ctx) -> Payload:
        return Payload(dict(server.model))

    def init_client(self, k: int, server: ServerState) -> ClientState:
        return ClientState()

    def client_update(
        self, down: Payload, state: ClientState, data, ctx
    ) -> tuple[Payload, ClientState]:
        seen = state.tensors.get("seen", torch.zeros((), dtype=torch.int64)) + 1
        up = Payload(
            {"w": down.tensors["w"] + float(ctx.client_id)}, num_examples=1, metrics={"loss": 0.0}
        )
        keep = (
            {"seen": seen, "pad": torch.full((8,), float(ctx.client_id))} if self.stateful else {}
        )
        return up, ClientState(tensors=keep, last_round=ctx.round)

    def server_aggregate(
        self, server: ServerState, ups: Mapping[int, Payload], ctx, public
    ) -> ServerState:
        w = torch.stack([ups[k].tensors["w"] for k in sorted(ups)]).mean(0)
        return ServerState(model={"w": w})


class NoData:
    """Registered clients without any per-client object: the loop asks only for the sampled ones."""

    def __init__(self, n: int) -> None:
        self.n, self.asked = n, set()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int):
        self.asked.add(k)


def settings(rounds: int, per_round: int) -> SimSettings:
    return SimSettings(
        seed=0, num_rounds=rounds, local_epochs=1, per_round=per_round, device=torch.device("cpu")
    )


def test_store_reloads_evicted_states_from_disk_and_never_caches_empty_ones(tmp_path: Path) -> None:
    store = ClientStateStore(tmp_path, mem_budget=0)
    for k in range(5):
        store.put(k, ClientState(tensors={"t": torch.full((3,), float(k))}, last_round=2), round_=2)
    store.put(7, ClientState(tensors={}, last_round=2), round_=2)
    assert store.cached_clients == 1  # budget 0: only the latest state stays in memory
    for k in range(5):
        assert torch.equal(store.get(k).tensors["t"], torch.full((3,), float(k)))
        assert store.get(k).last_round == 2
    assert store.get(7) == ClientState(tensors={}, last_round=2)
    assert store.get(6) is None and 6 not in store and 7 in store
    roomy = ClientStateStore(tmp_path / "b")
    for k in range(1000):
        roomy.put(k, ClientState(tensors={}, last_round=1), round_=1)
    assert roomy.cached_clients == 0 and not (tmp_path / "b").exists()


def test_manifest_reads_as_the_former_mapping_and_restores_either_form(tmp_path: Path) -> None:
    store = ClientStateStore(tmp_path)
    store.put(12, ClientState(tensors={"t": torch.ones(2)}, last_round=3), round_=3)
    store.put(4, ClientState(tensors={}, last_round=None), round_=3)
    m = store.manifest()
    plain = {"4": {"file": None, "last_round": None}, "12": {"file": "12-r3.pt", "last_round": 3}}
    assert dict(m) == plain and list(m) == ["4", "12"]
    again = pickle.loads(pickle.dumps(m))
    for form in (again, plain):
        other = ClientStateStore(tmp_path)
        other.restore(form)
        assert dict(other.manifest()) == plain
        assert (
            torch.equal(other.get(12).tensors["t"], torch.ones(2))
            and other.get(4).last_round is None
        )


def _referenced(work: Path) -> set[str]:
    ckpt = Checkpointer(PretrainDir(work))
    return {f for m in ckpt.manifests() for f in ClientManifest.of(m).files()}


@pytest.mark.parametrize("every", [1, 3])
def test_replaced_state_files_go_once_no_kept_checkpoint_refers_to_them(
    tmp_path: Path, every: int
) -> None:
    s = SimSettings(
        seed=0,
        num_rounds=9,
        local_epochs=1,
        per_round=4,
        device=torch.device("cpu"),
        checkpoint_every=every,
    )
    for stop in (4, 7, None):  # interrupted twice, resumed from the last checkpoint each time
        simulate(Counting(stateful=True), NoData(10), s, tmp_path, stop_after=stop)
        on_disk = {p.name for p in PretrainDir(tmp_path).states.glob("*.pt")}
        referenced = _referenced(tmp_path)
        last = Checkpointer(PretrainDir(tmp_path)).rounds()[-1]
        assert referenced <= on_disk  # every file a kept checkpoint refers to is there
        # and nothing else, but the states of rounds run after the last checkpoint (the resumed run
        # sweeps them)
        assert all(int(f.split("-r")[1][:-3]) > last for f in on_disk - referenced)
        assert stop is not None or on_disk == referenced
    straight = tmp_path / "straight"
    simulate(Counting(stateful=True), NoData(10), s, straight)
    final = Checkpointer(PretrainDir(tmp_path)).load_latest()
    assert dict(final["clients"]) == dict(
        Checkpointer(PretrainDir(straight)).load_latest()["clients"]
    )
    assert torch.equal(
        final["model"]["w"], Checkpointer(PretrainDir(straight)).load_latest()["model"]["w"]
    )


@pytest.mark.parametrize("stateful", [False, True])
def test_checkpoint_size_follows_sampled_clients_not_registered_ones(
    tmp_path: Path, stateful: bool
) -> None:
    sizes, touched = {}, {}
    for registered in (100, 10_000):
        data = NoData(registered)
        work = tmp_path / str(registered)
        simulate(Counting(stateful), data, settings(rounds=3, per_round=10), work)
        ckpt = Checkpointer(PretrainDir(work))
        sizes[registered] = ckpt.path(3).stat().st_size
        touched[registered] = len(data.asked)
        # one index entry per client sampled
        assert len(ckpt.load_latest()["clients"]) == len(data.asked)
    # 24 bytes per client sampled (and a few for pickling), nothing per client registered
    grown = sizes[10_000] - sizes[100]
    assert grown <= 24 * (touched[10_000] - touched[100]) + 64, (sizes, touched)


def test_loop_touches_only_sampled_clients(tmp_path: Path) -> None:
    data = NoData(10_000)
    simulate(Counting(stateful=False), data, settings(rounds=2, per_round=10), tmp_path)
    assert 0 < len(data.asked) <= 20
    assert np.array_equal(np.sort(list(data.asked)), np.unique(list(data.asked)))
