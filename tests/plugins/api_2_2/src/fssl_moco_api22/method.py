"""FedMoCo as a plugin author wrote it against plugin API 2.2 (issue 57), frozen: MoCo-v2 clients
(He et al., CVPR 2020; Chen et al., arXiv 2003.04297) federated by FedAvg of the query network. Each
client keeps a momentum key network (``key.*``), a queue of K negative keys (``queue``) and the
queue's write pointer (``queue_ptr``) across its rounds.

Plugin API 2.2 had no ``Inert``, ``inert_settings`` or ``evolving_client_state``: this file names
none of them, and must keep passing ``check-method`` under every later 2.x (docs/adding-a-method.md
§10). Do not edit it to make a check pass: a failure here is a broken compatibility promise, to be
fixed in the harness. It imports only ``benchmark.api`` and torch.

Three broken copies, each saving a piece of state it does not use: ``QueueReinitialised``,
``PointerReset`` and ``KeyFromBroadcast``; check-method fails each naming its piece.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import (
    AugmentConfig,
    ClientData,
    ClientState,
    ComponentSpec,
    Encoder,
    InputSpec,
    MethodBase,
    Payload,
    RoundContext,
    ServerState,
    Stream,
    UnlabeledView,
    adam,
    average_uploads,
    build_backbone,
    load_tensors,
    mlp_head,
    scoped_torch_seed,
    select,
    tensors_of,
    torch_gen,
    two_views,
)


@dataclass(frozen=True, kw_only=True)
class FedMoCoConfig:
    tau: float = 0.2  # τ, InfoNCE temperature (MoCo-v2)
    momentum: float = 0.99  # m, key network momentum
    queue_size: int = 256  # K, negatives kept per client
    lr: float = 1e-2
    batch_size: int = 64
    proj_dim: int = 128
    augment: AugmentConfig = field(default_factory=AugmentConfig)

    def __post_init__(self) -> None:
        if self.tau <= 0 or self.lr <= 0 or not 0 <= self.momentum < 1 or self.queue_size < 1:
            raise ValueError("tau, lr > 0, 0 <= momentum < 1, queue_size >= 1")


class Net(nn.Module):
    def __init__(self, encoder: nn.Module, projector: nn.Module) -> None:
        super().__init__()
        self.encoder, self.projector = encoder, projector

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.projector(self.encoder(x)), dim=1)


def info_nce(q: torch.Tensor, k: torch.Tensor, queue: torch.Tensor, tau: float) -> torch.Tensor:
    """MoCo's loss: the positive key against the queue's K negatives."""
    pos = (q * k).sum(dim=1, keepdim=True)
    neg = q @ queue.T
    logits = torch.cat([pos, neg], dim=1) / tau
    return F.cross_entropy(logits, torch.zeros(q.shape[0], dtype=torch.long, device=q.device))


def enqueue(queue: torch.Tensor, ptr: int, keys: torch.Tensor) -> int:
    """Write ``keys`` into the ring ``queue`` from slot ``ptr``; the next pointer."""
    idx = (ptr + torch.arange(keys.shape[0], device=queue.device)) % queue.shape[0]
    queue[idx] = keys
    return int((ptr + keys.shape[0]) % queue.shape[0])


class FedMoCo(MethodBase):
    """FedMoCo (plugin API 2.2): MoCo-v2 clients with a kept momentum key network and queue, FedAvg
    of the query network."""

    name: ClassVar[str] = "fedmoco_api22"
    version: ClassVar[str] = "1"
    Config: ClassVar[type] = FedMoCoConfig
    payload_up: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*")
    payload_down: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*")
    smoke_settings: ClassVar[dict] = {
        "method": {"proj_dim": 16, "queue_size": 48, "batch_size": 32}
    }

    def __init__(self, cfg: FedMoCoConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)

    def build(self) -> Net:
        encoder, feat_dim = build_backbone(self.backbone.name, dict(self.backbone.params))
        return Net(encoder, mlp_head(feat_dim, feat_dim, self.cfg.proj_dim))

    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            return ServerState(model=tensors_of(self.build()))

    def fresh_queue(self, client_id: int) -> torch.Tensor:
        gen = torch_gen(0, Stream.INIT, 7, client_id)
        return F.normalize(
            torch.randn(self.cfg.queue_size, self.cfg.proj_dim, generator=gen), dim=1
        )

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        key = {f"key.{k}": v.clone() for k, v in server.model.items()}
        return ClientState(
            tensors={
                **key,
                "queue": self.fresh_queue(client_id),
                "queue_ptr": torch.zeros((), dtype=torch.long),
            }
        )

    # what a client reads from its state: the three broken copies override one each
    def queue_of(self, state: ClientState, client_id: int) -> torch.Tensor:
        return state.tensors["queue"].clone()

    def ptr_of(self, state: ClientState) -> int:
        return int(state.tensors["queue_ptr"])

    def key_of(self, state: ClientState, down: Payload) -> Mapping[str, torch.Tensor]:
        return select(state.tensors, "key.", strip=True)

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload(dict(server.model))

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        cfg, k_id = self.cfg, int(ctx.client_id)
        with scoped_torch_seed(0, Stream.INIT, 0):  # overwritten by load_tensors
            query, key = self.build().to(ctx.device), self.build().to(ctx.device)
        load_tensors(query, down.tensors)
        load_tensors(key, self.key_of(state, down))
        key.requires_grad_(False)
        queue = self.queue_of(state, k_id).to(ctx.device)
        ptr = self.ptr_of(state)
        opt = adam(query.parameters(), lr=cfg.lr)
        view = data.train.to(ctx.device)
        losses = []
        for idx in view.batch_indices(cfg.batch_size, ctx.generator):
            v1, v2 = two_views(
                view.images[idx.to(view.images.device)],
                cfg.augment,
                ctx.generator,
                mean=view.mean,
                std=view.std,
            )
            with torch.no_grad():
                k = key(v2)
            loss = info_nce(query(v1), k, queue, cfg.tau)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():  # the momentum update of the key network, then the queue
                for pk, pq in zip(key.parameters(), query.parameters(), strict=True):
                    pk.mul_(cfg.momentum).add_(pq.detach(), alpha=1 - cfg.momentum)
                ptr = enqueue(queue, ptr, k)
            losses.append(loss.detach())
        metrics = {
            "loss": float(torch.stack(losses).mean()) if losses else 0.0,
            "steps": float(len(losses)),
        }
        kept = {
            **{f"key.{n}": t for n, t in tensors_of(key).items()},
            "queue": queue.cpu(),
            "queue_ptr": torch.tensor(ptr, dtype=torch.long),
        }
        return (
            Payload(tensors_of(query), num_examples=data.num_examples, metrics=metrics),
            ClientState(tensors=kept, last_round=ctx.round),
        )

    def server_aggregate(
        self,
        server: ServerState,
        ups: Mapping[int, Payload],
        ctx: RoundContext,
        public: UnlabeledView | None,
    ) -> ServerState:
        if not ups:
            return server
        return ServerState(model={**server.model, **average_uploads(ups, "num_examples")})

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        net = self.build()
        load_tensors(net, server.model)
        return self.export(net.encoder.eval())


class QueueReinitialised(FedMoCo):
    """Broken: the queue is saved, and every round starts from a fresh one."""

    name: ClassVar[str] = "fedmoco_api22_queue_reset"

    def queue_of(self, state: ClientState, client_id: int) -> torch.Tensor:
        return self.fresh_queue(client_id)


class PointerReset(FedMoCo):
    """Broken: the pointer is saved, and every round writes from slot 0."""

    name: ClassVar[str] = "fedmoco_api22_ptr_reset"

    def ptr_of(self, state: ClientState) -> int:
        return 0


class KeyFromBroadcast(FedMoCo):
    """Broken: the key network is saved, and every round reloaded from the broadcast query."""

    name: ClassVar[str] = "fedmoco_api22_key_from_broadcast"

    def key_of(self, state: ClientState, down: Payload) -> Mapping[str, torch.Tensor]:
        return down.tensors
