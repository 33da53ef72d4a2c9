"""ToyPlugin: FedAvg of a tiny contrastive objective, a few local steps per round (a test fixture,
not a method).

It imports only ``benchmark.api`` (the stable surface for plugins) and torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import torch
import torch.nn.functional as F

from benchmark.api import (
    AugmentConfig,
    ClientData,
    ClientState,
    ComponentSpec,
    Encoder,
    InputSpec,
    MethodBase,
    Payload,
    Requirement,
    RoundContext,
    ServerState,
    Stream,
    UnlabeledView,
    build_backbone,
    scoped_torch_seed,
    two_views,
)


@dataclass(frozen=True, kw_only=True)
class ToyPluginConfig:
    tau: float = 0.5
    lr: float = 1e-3
    batch_size: int = 32
    max_steps: int = 4  # local optimizer steps per round (keeps the fixture fast)
    augment: AugmentConfig = field(default_factory=AugmentConfig)


def contrastive(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    z1, z2 = F.normalize(z1, dim=1), F.normalize(z2, dim=1)
    logits = z1 @ z2.T / tau
    target = torch.arange(z1.shape[0], device=z1.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        f"encoder.{k}": v.detach().to("cpu", copy=True)
        for k, v in module.state_dict().items()
        if not k.endswith("num_batches_tracked")
    }


def _load(module: torch.nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    own = module.state_dict()
    with torch.no_grad():
        for key, target in own.items():
            if not key.endswith("num_batches_tracked"):
                target.copy_(tensors[f"encoder.{key}"])


class ToyPlugin(MethodBase):
    """ToyPlugin (out-of-tree test fixture): FedAvg of a few steps of a contrastive loss on pooled
    features."""

    name: ClassVar[str] = "toy_plugin"
    version: ClassVar[str] = "1"
    Config: ClassVar[type] = ToyPluginConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    payload_up: ClassVar[tuple[str, ...]] = ("encoder.*",)
    payload_down: ClassVar[tuple[str, ...]] = ("encoder.*",)
    smoke_settings: ClassVar[dict] = {}

    def __init__(self, cfg: ToyPluginConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)

    def _build(self) -> tuple[torch.nn.Module, int]:
        with scoped_torch_seed(0, Stream.INIT, 0):  # overwritten by _load before use
            return build_backbone(self.backbone.name, dict(self.backbone.params))

    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            module, _ = build_backbone(self.backbone.name, dict(self.backbone.params))
        return ServerState(model=_state(module))

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload(dict(server.model))

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        net = self._build()[0].to(ctx.device)
        _load(net, down.tensors)
        net.train()
        opt = torch.optim.Adam(net.parameters(), lr=self.cfg.lr)
        view = data.train.to(ctx.device)
        losses = []
        for step, idx in enumerate(view.batch_indices(self.cfg.batch_size, ctx.generator)):
            if step >= self.cfg.max_steps:
                break
            v1, v2 = two_views(
                view.images[idx.to(view.images.device)],
                self.cfg.augment,
                ctx.generator,
                mean=view.mean,
                std=view.std,
            )
            loss = contrastive(net(v1), net(v2), self.cfg.tau)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        metrics = {"loss": sum(losses) / max(len(losses), 1), "steps": float(len(losses))}
        return Payload(_state(net), num_examples=data.num_examples, metrics=metrics), ClientState(
            last_round=ctx.round
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
        payloads = [ups[k] for k in sorted(ups)]
        total = float(sum(p.num_examples for p in payloads))
        model = {
            key: sum((p.num_examples / total) * p.tensors[key].double() for p in payloads).to(
                payloads[0].tensors[key].dtype
            )
            for key in payloads[0].tensors
        }
        return ServerState(model=model, extra=server.extra)

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        module, feat_dim = self._build()
        _load(module, server.model)
        return self.export(module.eval(), feat_dim)
