"""``transfer-linear@v1`` (docs/protocols/evaluation.md §3.6): ``linear@v1`` with the probe trained
and tested on a target dataset.

CIFAR-10 → STL-10 (labelled train split, 5,000 images; test 8,000; resized 96 → 32 with antialiased
bilinear resampling, flag ``target_resolution``) and CIFAR-100 → CIFAR-10. Label fractions 100/10/1
% are class-balanced (§2.3, subset seed 0). Normalisation is the encoder's own pre-training
statistics, not the target's. The target loads through ``load_dataset_splits`` from the data root
and fails with the dataset's ``DatasetUnavailable`` message (how to prefetch it) when it is absent.
"""

from __future__ import annotations

import time
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
    TaskScores,
    load_dataset_splits,
)
from tasks.cards import load_card
from tasks.features import cached_features
from tasks.members import modules_of, score_members
from tasks.probes.linear_probe import accuracy, standardize, train_linear_head
from tasks.subsets import class_balanced_subset, subset_digest


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


class Transfer:
    """Linear probe of the pre-trained encoder on another dataset (Dec-SSL Tables 2-bottom and 4
    settings)."""

    name: ClassVar[str] = "transfer"
    version: ClassVar[str] = "1"
    main_metric: ClassVar[str] = "top1"
    higher_is_better: ClassVar[bool] = True
    Config: ClassVar[type] = TransferConfig

    def __init__(self, cfg: TransferConfig) -> None:
        self.cfg = cfg

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

    def run(self, encoder: Encoder, ctx: TaskContext) -> TaskScores:
        t0 = time.perf_counter()
        c = self.cfg
        # raises DatasetUnavailable with the fix
        target = load_dataset_splits(c.target, {}, _data_root(ctx))
        idx = class_balanced_subset(
            target.train.labels, c.label_fraction, c.subset_seed, target.num_classes
        )
        train = resize_split(target.train.subset(idx), c.target_resolution)
        test = resize_split(target.test, c.target_resolution)
        top5s: list[float] = []

        def one(member: int) -> float:
            module = modules_of(encoder)[member]
            key: tuple[Any, ...] = (
                encoder.fingerprint,
                id(module),
                "transfer",
                c.target,
                target.revision,
                c.target_resolution,
            )
            tr = cached_features(
                ctx.feature_cache,
                (*key, "train", subset_digest(idx)),
                module,
                train,
                encoder.mean,
                encoder.std,
                ctx.device,
            )
            te = cached_features(
                ctx.feature_cache,
                (*key, "test"),
                module,
                test,
                encoder.mean,
                encoder.std,
                ctx.device,
            )
            tr, te = standardize(tr, te)
            head = train_linear_head(
                tr,
                torch.as_tensor(train.labels),
                target.num_classes,
                epochs=c.epochs,
                batch_size=c.batch_size,
                lr=c.lr,
                weight_decay=c.weight_decay,
                seed=ctx.seed,
                device=ctx.device,
            )
            # the test split is read once, here
            top1, top5 = accuracy(head, te.to(ctx.device), test.labels)
            top5s.append(top5)
            return top1

        values, extra = score_members(encoder, one, "top1")
        values["top5"] = float(np.mean(top5s))
        extra = {
            **extra,
            "target": c.target,
            "target_revision": target.revision,
            "subset_digest": subset_digest(idx),
            "train_samples": int(idx.size),
            "test_samples": len(test),
        }
        return TaskScores(
            task=self.name,
            card=self.card(),
            main_metric="top1",
            higher_is_better=True,
            values=values,
            wall_time_s=time.perf_counter() - t0,
            extra=extra,
        )
