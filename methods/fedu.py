"""FedU (Zhuang et al., "Collaborative Unsupervised Visual Representation Learning from
Decentralized Data", ICCV 2021, arXiv 2108.06492; official code EasyFL ``applications/fedssl``).
Spec: docs/methods/fedu.md.

BYOL on every client. Clients upload the online encoder (backbone + projector) and the predictor;
the server averages them with n_k weights; the target encoder never leaves the client (ClientState).
At the start of a round the global online encoder replaces the client's, and the divergence-aware
predictor update (DAPU) keeps the local predictor when D(θ_g, θ_k) ≥ μ_dapu (§2.4). The BYOL
networks, local training and shared tensors are the same as FedEMA's (methods/_shared/fedbyol.py);
this file holds what is FedU's own, the DAPU merge (:meth:`FedU.merge`), and its client step with
the loss call (:meth:`FedU.client_update`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch

from benchmark.api import (
    METHODS,
    ClientData,
    ClientState,
    Payload,
    RoundContext,
    select,
    two_views,
)
from methods._shared.byol import byol_forward_loss
from methods._shared.fedbyol import (
    ONLINE,
    PREDICTOR,
    TARGET,
    BYOLConfig,
    FederatedBYOL,
    MergeResult,
    first_merge,
    local_divergence,
    local_update,
    target_is_online,
)


@dataclass(frozen=True, kw_only=True)
class FedUConfig(BYOLConfig):
    """Hyperparameters of docs/methods/fedu.md §3 (project defaults = EasyFL ``main.py`` /
    ``model.py``); the fields are :class:`~methods._shared.fedbyol.BYOLConfig`'s."""


@METHODS.register("fedu")
class FedU(FederatedBYOL):
    """FedU (Zhuang et al., ICCV 2021): BYOL clients, online encoder + predictor aggregated, DAPU
    (docs/methods/fedu.md §2)."""

    name: ClassVar[str] = "fedu"
    version: ClassVar[str] = "2"  # 2: a client smaller than B trains (issue 46)
    Config: ClassVar[type] = FedUConfig
    # check-method's state_read: the kept online encoder reaches the upload only through DAPU's test
    state_read_exempt: ClassVar[Mapping[str, str]] = {
        "online.*": "read by DAPU's divergence test D(θ_g, θ_k) ≥ μ_dapu only; the upload changes "
        "only when perturbing it flips that test, which the smoke cell's client does not"
    }
    cfg: FedUConfig

    def merge(self, down: Payload, state: ClientState, ctx: RoundContext) -> MergeResult:
        """docs/methods/fedu.md §2.4 steps 1–2: first participation copies the global model; later
        ones apply DAPU."""
        glob = {k: v.clone() for k, v in down.tensors.items()}
        if state.last_round is None:
            return first_merge(glob)
        d = local_divergence(self.cfg, down, state, self.divergence_names())
        take_global = d < self.cfg.dapu_threshold
        pred = select(glob if take_global else state.tensors, PREDICTOR)
        start = {
            **select(glob, ONLINE),
            **{k: v.clone() for k, v in pred.items()},
            **select(state.tensors, TARGET),
        }
        return MergeResult(start, {}, {"divergence": d, "dapu_global": float(take_global)}, False)

    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]:
        """docs/methods/fedu.md §2.4: the DAPU merge (:meth:`merge`), then E local epochs of BYOL
        from the merged tensors; the loss of one batch is ``batch_loss``. The loop around it (SGD,
        the target's EMA, what is uploaded and kept) is methods/_shared/fedbyol.py: local_update."""
        merged = self.merge(down, state, ctx)
        net = self.nets.get(ctx.device)
        cfg, view = self.cfg, data.train
        alias = target_is_online(cfg, merged)

        def batch_loss(batch: torch.Tensor) -> torch.Tensor:
            v1, v2 = two_views(batch, cfg.augment, ctx.generator, mean=view.mean, std=view.std)
            # ℓ(p(v¹), sg z_ξ(v²)) + ℓ(p(v²), sg z_ξ(v¹)): methods/_shared/byol.py: byol_loss
            return byol_forward_loss(net, v1, v2, target_alias=alias)

        return local_update(net, cfg, merged, data, ctx, batch_loss)
