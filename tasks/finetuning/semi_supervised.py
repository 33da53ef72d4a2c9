"""``semisup@v1`` (docs/protocols/evaluation.md §3.5): full fine-tuning of backbone + Linear(d, C)
on a class-balanced label subset.

The subset is drawn with its own seed (§2.3; identical across methods and training seeds), training
runs a fixed step budget with SGD + Nesterov and a per-step cosine to 0, and the full test split is
read once after the last step (selection ``final``). The encoder passed in is never mutated: the
task fine-tunes a deep copy.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import (
    AugmentConfig,
    DatasetSplit,
    ProtocolCard,
    Stream,
    augment,
    rows_to,
    scoped_torch_seed,
    torch_gen,
)
from tasks.cards import load_card
from tasks.finetuning.classifier import Classifier, LabelledFineTune, fine_tune

_STREAM_PATH = 31  # Stream.TASK sub-path of this task (head init, then data order / augmentation)


@dataclass(frozen=True, kw_only=True)
class SemiSupervisedConfig:
    label_fraction: float = 0.01  # f: 0.01 or 0.1 (§3.5)
    subset_seed: int = 0  # part of the card (§2.3)
    steps: int = 2000  # fixed budget for both fractions (§3.5)
    batch_size: int = 64
    lr: float = 0.01  # at batch 64
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 0.0
    crop_scale: tuple[float, float] = (0.5, 1.0)  # RRC(32, scale (0.5, 1), bicubic) + flip
    interpolation: str = "bicubic"
    flip_p: float = 0.5

    def __post_init__(self) -> None:
        if not 0 < self.label_fraction <= 1:
            raise ValueError("label_fraction must be in (0, 1]")
        if self.steps < 1 or self.batch_size < 2 or self.lr <= 0:
            raise ValueError("steps must be >= 1, batch_size >= 2 and lr > 0")
        if self.interpolation not in ("bilinear", "bicubic"):
            raise ValueError("interpolation must be 'bilinear' or 'bicubic'")


def step_batches(
    train: DatasetSplit,
    cfg: SemiSupervisedConfig,
    gen: torch.Generator,
    aug: AugmentConfig,
    *,
    size: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    device: torch.device,
    epochs: list[int],
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``cfg.steps`` augmented batches, reshuffled every epoch, no drop_last; counts the epochs
    begun in ``epochs[0]``. DEVIATION: a trailing batch of one image is skipped (BatchNorm in train
    mode cannot normalise a single sample); it happens only when n ≡ 1 (mod batch size)."""
    labels = torch.as_tensor(train.labels, dtype=torch.long)
    n, drawn = len(train), 0
    while drawn < cfg.steps:
        epochs[0] += 1
        for idx in torch.randperm(n, generator=gen).split(cfg.batch_size):
            if drawn >= cfg.steps:
                break
            if len(idx) < 2:
                continue
            x = augment(
                rows_to(train.images, idx, device),
                aug,
                gen,
                size=size,
                mean=mean,
                std=std,
            )
            yield x, rows_to(labels, idx, device)
            drawn += 1


def semisup_recipe(
    backbone: nn.Module,
    feat_dim: int,
    train: DatasetSplit,
    cfg: SemiSupervisedConfig,
    *,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    size: int,
    seed: int,
    device: torch.device,
) -> tuple[Classifier, dict[str, float]]:
    """Fine-tune a deep copy of ``backbone`` with a new head for ``cfg.steps`` SGD steps (Nesterov,
    a per-step cosine to 0, no warm-up); returns (model, stats)."""
    with scoped_torch_seed(seed, Stream.TASK, _STREAM_PATH, 1):
        model = Classifier(copy.deepcopy(backbone), feat_dim, train.num_classes)
    model.to(device).train()  # BN in train mode during training
    opt = torch.optim.SGD(
        model.parameters(),
        lr=cfg.lr,
        momentum=cfg.momentum,
        nesterov=cfg.nesterov,
        weight_decay=cfg.weight_decay,
    )
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.steps, eta_min=0.0)
    aug = AugmentConfig(
        crop_scale=cfg.crop_scale,
        interpolation=cfg.interpolation,
        flip_p=cfg.flip_p,
        jitter_p=0.0,
        gray_p=0.0,
        blur_p=0.0,
    )
    gen = torch_gen(seed, Stream.TASK, _STREAM_PATH, 2)
    if len(train) < 2:
        raise ValueError(
            f"semi-supervised fine-tuning needs at least 2 labelled images, got {len(train)}"
        )
    epochs = [0]
    batches = step_batches(
        train, cfg, gen, aug, size=size, mean=mean, std=std, device=device, epochs=epochs
    )
    _, last_loss = fine_tune(
        model,
        batches,
        opt,
        loss_fn=F.cross_entropy,
        what="semi-supervised fine-tuning",
        after_step=sched.step,
    )
    return model, {"epochs": float(epochs[0]), "final_train_loss": last_loss}


class SemiSupervised(LabelledFineTune):
    """Semi-supervised fine-tuning on 1 % or 10 % class-balanced labels (project card,
    docs/protocols/evaluation.md §3.5)."""

    name: ClassVar[str] = "semi_supervised"
    Config: ClassVar[type] = SemiSupervisedConfig

    def card(self) -> ProtocolCard:
        c = self.cfg
        pct = f"{c.label_fraction * 100:g}%"
        # tasks/cards/semisup@v1.json; the label fraction is a card field
        card = load_card("semisup@v1")
        aug = {
            **card.settings["train_augmentation"],
            "crop_scale": c.crop_scale,
            "interpolation": c.interpolation,
            "flip_p": c.flip_p,
        }
        return card.protocol_card(
            {
                "label_fraction": c.label_fraction,
                "subset_seed": c.subset_seed,
                "lr": c.lr,
                "momentum": c.momentum,
                "nesterov": c.nesterov,
                "weight_decay": c.weight_decay,
                "steps": c.steps,
                "batch_size": c.batch_size,
                "train_augmentation": aug,
            },
            summary=f"semi-supervised fine-tuning, {pct} labels, {c.steps} steps, final",
        )

    def recipe(
        self, backbone: nn.Module, feat_dim: int, train: DatasetSplit, **kw: Any
    ) -> tuple[nn.Module, dict[str, Any]]:
        return semisup_recipe(backbone, feat_dim, train, self.cfg, **kw)
