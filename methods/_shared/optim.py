"""Optimizers and per-round learning rates shared by the SimCLR-family methods (fedavg_simclr.md §2.4, §4).

A config passed here needs ``optimizer`` ("adam" | "sgd"), ``lr``, ``weight_decay``, ``momentum`` and, for
:func:`scheduled_lr`, ``lr_schedule`` ("step_rounds" | "constant"), ``lr_milestones`` and ``lr_gamma``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn


def round_lr(base_lr: float, round_1based: int, num_rounds: int, milestones: tuple[float, ...], gamma: float) -> float:
    """lr_t = lr · γ^{#{m ∈ milestones : m ≤ t}}, t = round − 1, milestones int(f·R) (fedavg_simclr.md §2.4)."""
    t = round_1based - 1
    steps = sum(1 for f in milestones if int(f * num_rounds) <= t)
    return base_lr * gamma**steps


def scheduled_lr(cfg: Any, round_1based: int, num_rounds: int) -> float:
    """The round's lr: :func:`round_lr` under ``lr_schedule: step_rounds``, else the constant ``cfg.lr``."""
    if cfg.lr_schedule == "step_rounds":
        return round_lr(cfg.lr, round_1based, num_rounds, cfg.lr_milestones, cfg.lr_gamma)
    return cfg.lr


def make_optimizer(cfg: Any, params: list[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """Adam(lr, weight_decay) or SGD(lr, momentum, weight_decay), as ``cfg.optimizer`` says."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


def optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Flatten an optimizer's per-parameter state into named CPU tensors (for ``optimizer_state: keep``)."""
    out = {}
    for idx, st in opt.state_dict()["state"].items():
        for key, value in st.items():
            t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
            out[f"opt.{idx}.{key}"] = t.detach().to("cpu", copy=True)
    return out


def restore_optimizer(opt: torch.optim.Optimizer, tensors: Mapping[str, torch.Tensor], device: torch.device) -> None:
    """Load the ``opt.*`` entries written by :func:`optimizer_tensors` back into ``opt`` (no-op when none)."""
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
