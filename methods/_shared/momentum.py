"""Momentum (EMA) target updates over module parameters: θ_T ← m·θ_T + (1 − m)·θ_O (BYOL; Orchestra
Alg. 1; FLESD Eq. 10). Buffers (BN running statistics) are deliberately not averaged: they evolve
through the target's own forward passes (docs/methods/orchestra.md §2.6 step 8,
docs/methods/flesd.md §2.8 step 2)."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def momentum_update_(target: nn.Module, online: nn.Module, momentum: float) -> None:
    """In place, parameters only; ``momentum = 1`` leaves the target unchanged, ``0`` copies the
    online weights."""
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        t.mul_(momentum).add_(o.detach(), alpha=1.0 - momentum)
