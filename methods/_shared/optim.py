"""Optimizers and per-round learning rates shared by the SimCLR-family methods
(docs/methods/fedavg_simclr.md §2.4, §4).

A config passed here needs ``optimizer`` ("adam" | "sgd"), ``lr``, ``weight_decay``, ``momentum``
and, for :func:`scheduled_lr`, ``lr_schedule`` ("step_rounds" | "step_epochs" | "constant"),
``lr_milestones`` and ``lr_gamma``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from benchmark.api import adam


def round_lr(
    base_lr: float, round_1based: int, num_rounds: int, milestones: tuple[float, ...], gamma: float
) -> float:
    """lr_t = lr · γ^{#{m ∈ milestones : m ≤ t}}, t = round − 1, milestones int(f·R)
    (docs/methods/fedavg_simclr.md §2.4)."""
    t = round_1based - 1
    steps = sum(1 for f in milestones if int(f * num_rounds) <= t)
    return base_lr * gamma**steps


def epoch_lr(
    base_lr: float,
    round_1based: int,
    local_epochs: int,
    milestones: tuple[float, ...],
    gamma: float,
) -> float:
    """lr = lr · γ^{#{m ∈ milestones : m ≤ e}}, e = (round − 1) · E the epochs run before the round:
    a MultiStepLR over epochs (Dec-SSL ``centralized_ssl_main.py``, milestones [30, 60, 90]),
    constant within a round (exact when the milestones fall on round boundaries, as 30/60/90 do with
    E = 5)."""
    e = (round_1based - 1) * local_epochs
    return base_lr * gamma ** sum(1 for m in milestones if m <= e)


def scheduled_lr(cfg: Any, round_1based: int, num_rounds: int, local_epochs: int = 1) -> float:
    """The round's lr: :func:`round_lr` under ``step_rounds`` (milestones as fractions of the
    rounds), :func:`epoch_lr` under ``step_epochs`` (milestones in epochs), else the constant
    ``cfg.lr``."""
    if cfg.lr_schedule == "step_rounds":
        return round_lr(cfg.lr, round_1based, num_rounds, cfg.lr_milestones, cfg.lr_gamma)
    if cfg.lr_schedule == "step_epochs":
        return epoch_lr(cfg.lr, round_1based, local_epochs, cfg.lr_milestones, cfg.lr_gamma)
    return cfg.lr


def make_optimizer(cfg: Any, params: list[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """Adam(lr, weight_decay) or SGD(lr, momentum, weight_decay), as ``cfg.optimizer`` says (Adam
    through ``benchmark.api.adam``: fused under the portable kernel mode)."""
    if cfg.optimizer == "adam":
        return adam(params, lr=lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Flatten an optimizer's per-parameter state into named CPU tensors (for ``optimizer_state:
    keep``)."""
    out = {}
    for idx, st in opt.state_dict()["state"].items():
        for key, value in st.items():
            t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
            out[f"opt.{idx}.{key}"] = t.detach().to("cpu", copy=True)
    return out


def restore_optimizer(
    opt: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor], device: torch.device
) -> None:
    """Load the ``opt.*`` entries written by :func:`optimizer_tensors` back into ``opt`` (no-op when
    none)."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        if not name.startswith("opt."):
            continue
        _, idx, key = name.split(".", 2)
        state.setdefault(int(idx), {})[key] = value.to(device) if key != "step" else value.clone()
    if state:
        sd = opt.state_dict()
        sd["state"] = state
        opt.load_state_dict(sd)
