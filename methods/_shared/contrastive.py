"""The local step of the SimCLR-style methods (docs/methods/fedavg_simclr.md §2.3,
docs/methods/flesd.md §2.6): two augmented views of a batch, one forward pass per view (the specs'
z1 = g(f(v1)); z2 = g(f(v2)) and the official code: BatchNorm statistics over B images and two
running-stat updates per step, not one batch of 2B), a contrastive loss of the two."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from benchmark.api import AugmentConfig, RoundContext, UnlabeledView, two_views
from methods._shared.losses import CONTRASTIVE_LOSSES


def contrastive_step(
    net: nn.Module,
    loss_form: str,
    tau: float,
    augment: AugmentConfig,
    view: UnlabeledView,
    ctx: RoundContext,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The local SimCLR loss of one batch: two augmented views, one forward pass each, ``loss_form``
    at ``tau``."""
    loss_fn = CONTRASTIVE_LOSSES[loss_form]

    def step(batch: torch.Tensor) -> torch.Tensor:
        v1, v2 = two_views(batch, augment, ctx.generator, mean=view.mean, std=view.std)
        z1, z2 = net(v1), net(v2)
        return loss_fn(z1, z2, tau)

    return step
