"""FedAvg-SimCLR, the Dec-SSL method (Wang et al., ICLR 2023, arXiv 2210.10947, §2.1 and App. C.1).

Plain FedAvg whose local objective is SimCLR: each participating client starts from the global
weights, runs E local epochs of SimCLR (NT-Xent, τ = 0.5, Adam 1e-3, wd 1e-6, optimizer reset each
round), and the server averages the returned weights. Spec: docs/methods/fedavg_simclr.md (§2
algorithm, §4 hyperparameters, §7 resolutions).

Config keys beyond the spec's names: ``proj_hidden``/``proj_out`` (None = the backbone's feature
dimension, which is the spec's 512 for ResNet-18), ``augment`` (the two-view pipeline; default =
Dec-SSL CIFAR, §2.5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch

from benchmark.api import (
    METHODS,
    PRECISIONS,
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
    prepare_module,
    scoped_torch_seed,
)
from methods._shared.aggregate import FedAvgServer
from methods._shared.modules import tensors_of
from methods._shared.nets import BackboneHead, WorkingNets
from methods._shared.simclr import (
    SimCLRConfig,
    encoder_of,
    local_bn_names,
    local_start,
    local_update,
    simclr_net,
    upload_weighting,
    without,
)


@dataclass(frozen=True, kw_only=True)
class FedAvgSimCLRConfig(SimCLRConfig):
    """Hyperparameters of docs/methods/fedavg_simclr.md §4 (project defaults = Dec-SSL CIFAR code
    unless noted); the fields are :class:`~methods._shared.simclr.SimCLRConfig`'s."""


@METHODS.register("fedavg_simclr", aliases=("dec_ssl", "fedsimclr", "f-simclr"))
class FedAvgSimCLR(FedAvgServer, MethodBase):
    """FedAvg-SimCLR / Dec-SSL (Wang et al., ICLR 2023; §2.1, App. C.1); also Orchestra's f-SimCLR,
    FLESD's FedAvg."""

    name: ClassVar[str] = "fedavg_simclr"
    version: ClassVar[str] = "2"
    # every step through ctx.precision (benchmark.core.precision)
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    Config: ClassVar[type] = FedAvgSimCLRConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    payload_up: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*")
    payload_down: ClassVar[tuple[str, ...]] = ("encoder.*", "projector.*")
    cfg: FedAvgSimCLRConfig

    def __init__(self, cfg: FedAvgSimCLRConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        super().__init__(cfg, backbone, inputs)
        self.nets = WorkingNets(self.build)

    # ---- model plumbing --------------------------------------------------------------------------
    def build(self) -> BackboneHead:
        return simclr_net(self.backbone, self.cfg)

    def bn_names(self) -> set[str]:
        return local_bn_names(self.nets.structure(), self.cfg)

    # ---- hooks -----------------------------------------------------------------------------------
    def init_server(self, ctx: RoundContext) -> ServerState:
        with scoped_torch_seed(ctx.seed, Stream.INIT):
            net = self.build()
        return ServerState(model=tensors_of(net))

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        if self.cfg.bn == "local":  # §7.1: BN tensors never leave the client
            bn = self.bn_names()
            return ClientState(tensors={k: v.clone() for k, v in server.model.items() if k in bn})
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        if self.cfg.bn == "local":
            return Payload(without(server.model, self.bn_names()))
        return Payload(dict(server.model))

    def start_tensors(self, down: Payload, state: ClientState) -> dict[str, torch.Tensor]:
        return local_start(down, state, self.cfg)

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        """§2.1: E local epochs of SimCLR from the global weights (methods/_shared/simclr.py
        ``local_update``)."""
        net = prepare_module(self.nets.get(ctx.device), ctx.device, channels_last=ctx.channels_last)
        return local_update(net, self.start_tensors(down, state), self.cfg, state, data, ctx)

    # ---- the server: FedAvg (FedAvgServer), §2.2, weights by ``weighting`` (§7.2) ---------------
    def fedavg_weighting(self) -> str:
        return upload_weighting(self.cfg)

    def fedavg_folds(self) -> bool:
        """Not under ``num_batches``, whose weights (batch counts) are the clients' to say."""
        return self.cfg.weighting != "num_batches"

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        return self.export(encoder_of(self.build(), server.model))
