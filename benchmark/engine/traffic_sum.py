"""A run's per-round traffic derived from its method's declaration (issue 52, item 2), counted the
way the round loop counts it (:func:`benchmark.engine.rounds.simulate`): round r samples its
clients from the (seed, SAMPLING, r) stream (:func:`~benchmark.engine.rounds.sample_clients`),
every sampled client's upload is counted once and the broadcast once per sampled client. The
method says what one client sends (``MethodBase.declared_traffic``, plugin API 2.5); this module
sums it. A ``pooled`` method runs one client holding the union of the partition, every round.

The shapes a declaration reads are those of the cell's own initial server state
(:func:`initial_server_state`: ``init_server`` of round 0, built on PyTorch's meta device), never
a submitted checkpoint's: a checkpoint whose server tensors were shrunk would declare less."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from benchmark.contracts.cell import Cell
from benchmark.contracts.declared_traffic import Sent, ServerTensors, TensorShape, TrafficContext
from benchmark.engine.rounds import SimSettings, sample_clients, server_context


def server_tensors(server: Any) -> ServerTensors:
    """The shapes of a server state (``ServerState``: model and extra tensors): what a declaration
    reads, taken from the cell's initial server state (:func:`initial_server_state`)."""

    def shapes(tensors: Mapping[str, Any]) -> dict[str, TensorShape]:
        return {
            k: TensorShape(tuple(int(d) for d in t.shape), int(t.element_size()))
            for k, t in tensors.items()
        }

    return ServerTensors(shapes(server.model), shapes(server.extra))


def initial_server_state(method: Any, cell: Cell, num_clients: int) -> Any:
    """The ``ServerState`` the round loop starts ``cell`` from (``init_server`` of round 0, with
    the context :func:`benchmark.engine.stages.prepare` gives it), built on PyTorch's meta device:
    every tensor's name, shape and dtype, nothing allocated, no data read (no public split: no
    method's initialisation reads one). ``num_clients``: the clients the engine runs (the
    partition's, 1 for a ``pooled`` method); the dataset's number of classes is the method's
    ``inputs``'."""
    import torch

    from benchmark.core.precision import Precision

    meta = torch.device("meta")
    pooled = getattr(method, "federation", "federated") == "pooled"
    settings = SimSettings(
        seed=cell.seed,
        num_rounds=cell.fl.rounds,
        local_epochs=cell.fl.local_epochs,
        per_round=1 if pooled else cell.fl.clients_per_round,
        device=meta,
        precision=Precision(cell.precision),
        num_classes=int(getattr(getattr(method, "inputs", None), "num_classes", 0)),
        num_clients=int(num_clients),
    )
    with meta:
        return method.init_server(server_context(settings, 0, None))


def server_layout(server: Any) -> dict[tuple[str, str], tuple[tuple[int, ...], str]]:
    """(``model`` or ``extra``, name) → (shape, dtype) of every tensor of a ``ServerState``."""
    return {
        (part, name): (tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."))
        for part in ("model", "extra")
        for name, t in getattr(server, part).items()
    }


def declares_traffic(method: Any) -> bool:
    """Whether ``method`` overrides ``declared_traffic`` (a plugin written before API 2.5 does
    not: its MethodBase default, or no such hook at all, declares nothing)."""
    from benchmark.contracts.method import MethodBase

    hook = getattr(type(method), "declared_traffic", None)
    return hook is not None and hook is not MethodBase.declared_traffic


def derived_traffic(
    method: Any,
    cell: Cell,
    tensors: ServerTensors,
    client_sizes: Sequence[int],
    public_size: int | None,
    rounds: int,
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(bytes up, bytes down) of each of the first ``rounds`` rounds of ``cell`` as ``method``
    declares them, given the server state's tensor shapes (the cell's initial ones) and the
    partition's client sizes; None when the method declares nothing. ValueError when the declaration is not one: not a :class:`Sent`,
    or two clients of a round receiving broadcasts of different sizes (the runner counts one
    broadcast per round)."""
    if not declares_traffic(method):
        return None
    pooled = getattr(method, "federation", "federated") == "pooled"
    sizes = [int(sum(client_sizes))] if pooled else [int(s) for s in client_sizes]
    per_round = 1 if pooled else cell.fl.clients_per_round
    up: list[int] = []
    down: list[int] = []
    for r in range(1, rounds + 1):
        counts = Counter(sizes[k] for k in sample_clients(cell.seed, r, len(sizes), per_round))
        round_up, broadcasts = 0, set()
        for examples, clients in sorted(counts.items()):
            at = TrafficContext(
                round=r,
                num_rounds=cell.fl.rounds,
                num_clients=len(sizes),
                local_epochs=cell.fl.local_epochs,
                examples=examples,
                public_size=public_size,
            )
            sent = method.declared_traffic(tensors, at)
            if sent is None:
                return None
            if not isinstance(sent, Sent):
                raise ValueError(
                    f"declared_traffic returned a {type(sent).__name__}, not a benchmark.api.Sent"
                )
            round_up += clients * sent.up
            broadcasts.add(sent.down)
        if len(broadcasts) > 1:
            raise ValueError(
                f"declared_traffic gives round {r}'s clients broadcasts of different sizes "
                f"({', '.join(str(b) for b in sorted(broadcasts))} bytes): the server sends one"
            )
        up.append(round_up)
        down.append(sum(counts.values()) * (broadcasts.pop() if broadcasts else 0))
    return tuple(up), tuple(down)


__all__ = [
    "declares_traffic",
    "derived_traffic",
    "initial_server_state",
    "server_layout",
    "server_tensors",
]
