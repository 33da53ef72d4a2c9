"""``linear@v1`` (docs/protocols/evaluation.md §3.2): a linear head on cached, standardised
features; final epoch; test read once."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import (
    ProtocolCard,
    Stream,
    TaskContext,
    adam,
    scoped_torch_seed,
    to_device,
    torch_gen,
)
from tasks.cards import load_card
from tasks.task_base import FeatureProbe


def standardize(
    train_f: torch.Tensor, test_f: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension standardisation with the training features' mean and std (+eps), applied to
    both splits."""
    mean = train_f.mean(0, keepdim=True)
    std = train_f.std(0, keepdim=True) + eps
    return (train_f - mean) / std, (test_f - mean) / std


def train_linear_head(
    train_f: torch.Tensor,
    train_y: torch.Tensor,
    num_classes: int,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
    seed: int,
    device: torch.device | str = "cpu",
) -> nn.Linear:
    """Adam, cosine decay to 0 over all steps, no warmup, reshuffled each epoch, no drop_last;
    returns the head."""
    with scoped_torch_seed(seed, Stream.TASK, 1):
        head = nn.Linear(train_f.shape[1], num_classes).to(device)
    gen = torch_gen(seed, Stream.TASK, 2)
    opt = adam(head.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
    n = train_f.shape[0]
    steps_per_epoch = math.ceil(n / batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(
        opt, T_max=max(1, epochs * steps_per_epoch), eta_min=0.0
    )
    x, y = train_f.to(device), torch.as_tensor(train_y).to(device)
    for _ in range(epochs):
        for idx in torch.randperm(n, generator=gen).split(batch_size):
            idx = to_device(idx, device)
            loss = F.cross_entropy(head(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return head


@torch.no_grad()
def accuracy(head: nn.Module, f: torch.Tensor, y) -> tuple[float, float]:
    logits = head(f)
    y = torch.as_tensor(y).to(logits.device)
    top1 = float((logits.argmax(1) == y).float().mean() * 100)
    k = min(5, logits.shape[1])
    top5 = float((logits.topk(k, dim=1).indices == y[:, None]).any(1).float().mean() * 100)
    return top1, top5


@dataclass(frozen=True, kw_only=True)
class LinearProbeConfig:
    epochs: int = 100
    batch_size: int = 512
    lr: float = 1e-3
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("epochs and batch_size must be >= 1 and lr > 0")


def linear_top1_top5(
    train_f: torch.Tensor,
    train_y,
    test_f: torch.Tensor,
    test_y,
    num_classes: int,
    cfg: Any,
    *,
    seed: int,
    device: torch.device | str,
) -> tuple[float, float]:
    """``linear@v1`` on one member's features: standardise, train the head (``cfg``: a config with
    linear@v1's fields, epochs, batch_size, lr, weight_decay), then read the test split once;
    (top-1, top-5)."""
    train_f, test_f = standardize(train_f, test_f)
    head = train_linear_head(
        train_f,
        torch.as_tensor(train_y),
        num_classes,
        epochs=cfg.epochs,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        seed=seed,
        device=device,
    )
    # the test split is read once, here
    return accuracy(head, test_f.to(device), test_y)


class LinearProbe(FeatureProbe):
    """The canonical linear probe: cached features, standardised; Adam + cosine; final epoch (no
    test selection)."""

    name: ClassVar[str] = "linear_probe"
    reads_partition: ClassVar[bool] = False  # the cell's dataset splits only
    Config: ClassVar[type] = LinearProbeConfig

    def card(self) -> ProtocolCard:
        c = self.cfg
        return load_card("linear@v1").protocol_card(  # tasks/cards/linear@v1.json + this config
            {
                "epochs": c.epochs,
                "batch_size": c.batch_size,
                "lr": c.lr,
                "weight_decay": c.weight_decay,
            },
            summary=f"linear probe, cached features, {c.epochs} ep, final",
        )

    def score_features(
        self, train_f: torch.Tensor, test_f: torch.Tensor, ctx: TaskContext
    ) -> tuple[float, dict[str, float]]:
        ds = ctx.dataset
        top1, top5 = linear_top1_top5(
            train_f,
            ds.train.labels,
            test_f,
            ds.test.labels,
            ds.num_classes,
            self.cfg,
            seed=ctx.seed,
            device=ctx.device,
        )
        return top1, {"top5": top5}
