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

from dataclasses import dataclass
from typing import ClassVar

import torch

from benchmark.api import (
    METHODS,
    ClientData,
    ClientState,
    Payload,
    Requirement,
    RoundContext,
    two_views,
)
from methods._shared.aggregate import FedAvgServer
from methods._shared.losses import CONTRASTIVE_LOSSES
from methods._shared.simclr import SimCLRConfig, SimCLRFamily, local_update


@dataclass(frozen=True, kw_only=True)
class FedAvgSimCLRConfig(SimCLRConfig):
    """Hyperparameters of docs/methods/fedavg_simclr.md §4 (project defaults = Dec-SSL CIFAR code
    unless noted); the fields are :class:`~methods._shared.simclr.SimCLRConfig`'s."""


@METHODS.register("fedavg_simclr", aliases=("dec_ssl", "fedsimclr", "f-simclr"))
class FedAvgSimCLR(FedAvgServer, SimCLRFamily):
    """FedAvg-SimCLR / Dec-SSL (Wang et al., ICLR 2023; §2.1, App. C.1); also Orchestra's f-SimCLR,
    FLESD's FedAvg. The client step and its loss are this file's (:meth:`client_update`), the other
    hooks the SimCLR family's; the server is FedAvg (§2.2), weights by ``weighting`` (§7.2)."""

    name: ClassVar[str] = "fedavg_simclr"
    version: ClassVar[str] = "2"
    Config: ClassVar[type] = FedAvgSimCLRConfig
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    cfg: FedAvgSimCLRConfig

    def fedavg_folds(self) -> bool:
        """Not under ``num_batches``, whose weights (batch counts) are the clients' to say."""
        return self.cfg.weighting != "num_batches"

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        """§2.1: from the global weights (its own BN tensors under ``bn: local``), E local epochs
        of SimCLR on this client's images; the loss of one batch is ``batch_loss`` (§2.3). The
        loop around it (optimizer, epochs, what is uploaded and kept) is
        methods/_shared/simclr.py: local_update."""
        net = self.nets.get(ctx.device, channels_last=ctx.channels_last)
        cfg, view = self.cfg, data.train
        # NT-Xent at τ: ntxent_2b (benchmark/building_blocks/heads.py, through benchmark.api);
        # loss_form crossview_1dir: methods/_shared/losses.py
        contrastive = CONTRASTIVE_LOSSES[cfg.loss_form]

        def batch_loss(batch: torch.Tensor) -> torch.Tensor:
            v1, v2 = two_views(batch, cfg.augment, ctx.generator, mean=view.mean, std=view.std)
            return contrastive(net(v1), net(v2), cfg.tau)  # one forward pass per view (§2.3)

        start = self.start_tensors(down, state)
        return local_update(net, start, cfg, state, data, ctx, batch_loss)
