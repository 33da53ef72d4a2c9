"""EMA and model-divergence maths, the one home of the exponential moving average: FedU and FedEMA's
model merge (``ema_update``), the momentum target networks of BYOL, Orchestra (Alg. 1) and FLESD
(Eq. 10) (``ema_step_`` on one tensor, ``ema_params_`` on paired parameter lists,
``momentum_update_`` on two modules), FedEMA's divergence-aware decay. Small and tested alone.

Notation of docs/methods/fedema.md §1: μ is the EMA decay (weight kept on the local model), λ_k the
per-client scaler, τ the autoscaler target. D(A, B) is the divergence of docs/methods/fedu.md §2.4:
the mean, over the backbone's non-shortcut convolution weights, of the Frobenius norm of the
difference (EasyFL ``_calculate_divergence``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import nn

TensorDict = Mapping[str, torch.Tensor]


def ema_update(
    old: TensorDict, new: TensorDict, momentum: float, *, keys: Iterable[str] | None = None
) -> dict[str, torch.Tensor]:
    """``momentum · old + (1 − momentum) · new`` for every key (or ``keys``); new tensors, inputs
    untouched.

    μ = 1 returns ``old`` and μ = 0 returns ``new`` bit-exactly (copies).

    >>> ema_update({"w": torch.zeros(2)}, {"w": torch.ones(2)}, 0.75)["w"]
    tensor([0.2500, 0.2500])
    """
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    out: dict[str, torch.Tensor] = {}
    for key in old.keys() if keys is None else keys:
        a, b = old[key], new[key]
        if momentum == 1.0:
            out[key] = a.clone()
        elif momentum == 0.0:
            out[key] = b.clone()
        else:
            out[key] = (a.to(torch.float64) * momentum + b.to(torch.float64) * (1.0 - momentum)).to(
                a.dtype
            )
    return out


@torch.no_grad()
def ema_step_(target: torch.Tensor, online: torch.Tensor, momentum: float) -> None:
    """In place, one tensor: ξ ← m·ξ + (1 − m)·θ, in the tensor's own dtype (``momentum = 1``
    leaves ``target`` unchanged, ``0`` copies ``online``)."""
    target.mul_(momentum).add_(online.detach(), alpha=1.0 - momentum)


@torch.no_grad()
def ema_params_(
    target: Sequence[torch.Tensor], online: Sequence[torch.Tensor], momentum: float
) -> None:
    """In place: ξ ← m·ξ + (1 − m)·θ for paired parameter lists (BYOL target update,
    docs/methods/fedu.md §2.4 step 3)."""
    if len(target) != len(online):
        raise ValueError("target and online parameter lists differ in length")
    for t, o in zip(target, online):
        ema_step_(t, o, momentum)


def momentum_update_(target: nn.Module, online: nn.Module, momentum: float) -> None:
    """In place, a momentum target network θ_T ← m·θ_T + (1 − m)·θ_O over the modules' parameters
    only (Orchestra Alg. 1; FLESD Eq. 10). Buffers (BN running statistics) are deliberately not
    averaged: they evolve through the target's own forward passes (docs/methods/orchestra.md §2.6
    step 8, docs/methods/flesd.md §2.8 step 2)."""
    ema_params_(list(target.parameters()), list(online.parameters()), momentum)


def divergence_weight(d: float, scaler: float, mu_max: float = 1.0) -> float:
    """μ = min(λ_k · d, μ_max) (docs/methods/fedema.md §2.4 step 5); an unset scaler (NaN) gives μ =
    0 (§6.11)."""
    if math.isnan(scaler):
        return 0.0
    return float(min(scaler * d, mu_max))


def autoscaler(tau: float, d: float) -> float:
    """λ_k = τ / d at the client's first EMA merge, so that μ = τ there (docs/methods/fedema.md §2.4
    step 4); NaN when d = 0."""
    return float(tau / d) if d > 0 else math.nan


def divergence_tensor_names(backbone: nn.Module, prefix: str = "") -> list[str]:
    """Weight names of the backbone's convolutions, minus the residual shortcut (projection)
    convolutions.

    Selected by role, not by name: a convolution is a shortcut when it sits inside a block's
    ``downsample`` (torchvision) or ``shortcut`` (EasyFL, kuangliu) branch. For a CIFAR ResNet-18
    this is the stem conv plus the 16 3×3 block convs: 17 tensors (docs/methods/fedu.md §2.4).
    """
    shortcut: set[int] = set()
    for mod in backbone.modules():
        for attr in ("downsample", "shortcut"):
            branch = getattr(mod, attr, None)
            if isinstance(branch, nn.Module):
                shortcut.update(id(m) for m in branch.modules())
    return [
        f"{prefix}{name}.weight"
        for name, mod in backbone.named_modules()
        if isinstance(mod, nn.Conv2d) and id(mod) not in shortcut
    ]
