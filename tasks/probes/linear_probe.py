"""``linear@v1`` (docs/protocols/evaluation.md §3.2): a linear head on cached, standardised
features; final epoch; test read once."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import (
    Encoder,
    ProtocolCard,
    Stream,
    TaskContext,
    TaskScores,
    adam,
    encoder_features,
    scoped_torch_seed,
    torch_gen,
)
from tasks.cards import load_card
from tasks.members import score_members


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
            idx = idx.to(device, non_blocking=True)
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


class LinearProbe:
    """The canonical linear probe: cached features, standardised; Adam + cosine; final epoch (no
    test selection)."""

    name: ClassVar[str] = "linear_probe"
    version: ClassVar[str] = "1"
    main_metric: ClassVar[str] = "top1"
    higher_is_better: ClassVar[bool] = True
    Config: ClassVar[type] = LinearProbeConfig

    def __init__(self, cfg: LinearProbeConfig) -> None:
        self.cfg = cfg

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

    def run(self, encoder: Encoder, ctx: TaskContext) -> TaskScores:
        t0 = time.perf_counter()
        ds = ctx.dataset
        top5s: list[float] = []

        def one(member: int) -> float:
            tr, te = encoder_features(encoder, ctx, member)
            tr, te = standardize(tr, te)
            head = train_linear_head(
                tr,
                torch.as_tensor(ds.train.labels),
                ds.num_classes,
                epochs=self.cfg.epochs,
                batch_size=self.cfg.batch_size,
                lr=self.cfg.lr,
                weight_decay=self.cfg.weight_decay,
                seed=ctx.seed,
                device=ctx.device,
            )
            # the test split is read once, here
            top1, top5 = accuracy(head, te.to(ctx.device), ds.test.labels)
            top5s.append(top5)
            return top1

        values, extra = score_members(encoder, one, "top1")
        values["top5"] = float(sum(top5s) / len(top5s))
        return TaskScores(
            task=self.name,
            card=self.card(),
            main_metric="top1",
            higher_is_better=True,
            values=values,
            wall_time_s=time.perf_counter() - t0,
            extra=extra,
        )
