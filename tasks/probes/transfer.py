"""``transfer-linear@v1`` (docs/protocols/evaluation.md §3.6): ``linear@v1`` with the probe trained
and tested on a target dataset.

CIFAR-10 → STL-10 (labelled train split, 5,000 images; test 8,000; resized 96 → 32 with antialiased
bilinear resampling, flag ``target_resolution``) and CIFAR-100 → CIFAR-10. Label fractions 100/10/1
% are class-balanced (§2.3, subset seed 0). Normalisation is the encoder's own pre-training
statistics, not the target's. The target loads through ``load_dataset_splits`` from the data root
and fails with the dataset's ``DatasetUnavailable`` message (how to prefetch it) when it is absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from benchmark.api import (
    DatasetSplit,
    Encoder,
    ProtocolCard,
    TaskContext,
    load_dataset_splits,
)
from tasks.cards import load_card
from tasks.features import cached_features
from tasks.members import modules_of, score_each_member
from tasks.probes.linear_probe import linear_top1_top5
from tasks.subsets import class_balanced_subset, subset_digest
from tasks.task_base import Scored, TaskBase


def resize_split(split: DatasetSplit, size: int, batch_size: int = 1024) -> DatasetSplit:
    """Antialiased bilinear resize of uint8 images to ``size``×``size`` (identity when already that
    size)."""
    if split.images.shape[-1] == size and split.images.shape[-2] == size:
        return split
    out = []
    for start in range(0, len(split), batch_size):
        x = split.images[start : start + batch_size].float()
        y = F.interpolate(
            x, size=(size, size), mode="bilinear", align_corners=False, antialias=True
        )
        out.append(y.round().clamp(0, 255).to(torch.uint8))
    images = torch.cat(out) if out else split.images.new_zeros((0, 3, size, size))
    return DatasetSplit(images, split.labels, split.num_classes)


@dataclass(frozen=True, kw_only=True)
class TransferConfig:
    # registered dataset name of the target (cifar10 for CIFAR-100 → CIFAR-10)
    target: str = "stl10"
    # 32 (pre-training resolution, project choice) or 96 for STL-10 (§3.6)
    target_resolution: int = 32
    label_fraction: float = 1.0  # 1.0, 0.1 or 0.01, class-balanced
    subset_seed: int = 0
    epochs: int = 100  # the rest is linear@v1 (§3.2)
    batch_size: int = 512
    lr: float = 1e-3
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if self.target_resolution < 1:
            raise ValueError("target_resolution must be >= 1")
        if not 0 < self.label_fraction <= 1:
            raise ValueError("label_fraction must be in (0, 1]")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise ValueError("epochs and batch_size must be >= 1 and lr > 0")


def _data_root(ctx: TaskContext) -> Path | None:
    # The runner passes Path(".") when no data root was given, while the cell's own dataset then
    # loads from the default root (FSSL_DATA_ROOT or ~/.cache); use the same default for the target.
    return None if str(ctx.data_root) in ("", ".") else Path(ctx.data_root)


class Transfer(TaskBase):
    """Linear probe of the pre-trained encoder on another dataset (Dec-SSL Tables 2-bottom and 4
    settings)."""

    name: ClassVar[str] = "transfer"
    Config: ClassVar[type] = TransferConfig

    def card(self) -> ProtocolCard:
        c = self.cfg
        # tasks/cards/transfer-linear@v1.json + config
        return load_card("transfer-linear@v1").protocol_card(
            {
                "target": c.target,
                "label_fraction": c.label_fraction,
                "subset_seed": c.subset_seed,
                "resolution": c.target_resolution,
                "epochs": c.epochs,
                "batch_size": c.batch_size,
                "lr": c.lr,
                "weight_decay": c.weight_decay,
            },
            summary=f"transfer linear probe → {c.target} ({c.label_fraction * 100:g}% labels, {c.target_resolution}px)",
        )

    def score(self, encoder: Encoder, ctx: TaskContext) -> Scored:
        c = self.cfg
        # raises DatasetUnavailable with the fix
        target = load_dataset_splits(c.target, {}, _data_root(ctx))
        idx = class_balanced_subset(
            target.train.labels, c.label_fraction, c.subset_seed, target.num_classes
        )
        train = resize_split(target.train.subset(idx), c.target_resolution)
        test = resize_split(target.test, c.target_resolution)

        def one(member: int) -> tuple[float, float]:
            module = modules_of(encoder)[member]
            key: tuple[Any, ...] = (
                encoder.fingerprint,
                id(module),
                "transfer",
                c.target,
                target.revision,
                c.target_resolution,
            )
            tr, te = (
                cached_features(
                    ctx.feature_cache,
                    (*key, *which),
                    module,
                    split,
                    encoder.mean,
                    encoder.std,
                    ctx.device,
                )
                for which, split in ((("train", subset_digest(idx)), train), (("test",), test))
            )
            return linear_top1_top5(
                tr,
                train.labels,
                te,
                test.labels,
                target.num_classes,
                c,
                seed=ctx.seed,
                device=ctx.device,
            )

        values, extra, top5s = score_each_member(encoder, one, "top1")
        values["top5"] = float(np.mean(top5s))
        return values, {
            **extra,
            "target": c.target,
            "target_revision": target.revision,
            "subset_digest": subset_digest(idx),
            "train_samples": int(idx.size),
            "test_samples": len(test),
        }
