"""Feature extraction (docs/protocols/evaluation.md §2.2): fp32, eval mode, no augmentation, whole
split in index order, cached per (encoder, member, split) in the task context so every task of a
cell (kNN, the linear probe, a plugin's own) shares one pass. ``benchmark.api`` exports these three
for tasks, built in or plugin (plugin API 2.3)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from benchmark.contracts.data_types import DatasetSplit
from benchmark.contracts.unlabeled_view import normalize
from benchmark.core.host_to_device import to_device


@torch.no_grad()
def extract_features(
    module: nn.Module,
    split: DatasetSplit,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    device: torch.device,
    batch_size: int = 512,
) -> torch.Tensor:
    """(N, d) float32 CPU features of ``split`` under ``module`` in eval mode; the module's mode is
    restored."""
    was_training = module.training
    module.eval().to(device)
    feats = []
    for start in range(0, len(split), batch_size):
        x = to_device(split.images[start : start + batch_size], device)
        feats.append(module(normalize(x, mean, std)).float().cpu())
    module.train(was_training)
    return torch.cat(feats) if feats else torch.zeros(0)


def cached_features(
    cache: dict, key: object, module: nn.Module, split: DatasetSplit, mean, std, device
) -> torch.Tensor:
    """``extract_features`` once per ``key`` in ``cache`` (a task context's ``feature_cache``)."""
    if key not in cache:
        cache[key] = extract_features(module, split, mean, std, device)
    return cache[key]


def encoder_features(encoder: Any, ctx: Any, member: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, test) features of the cell's dataset under the encoder (``member``: one of its
    ``members``, for encoders that export several), from the task context's shared cache: what a
    frozen-feature task reads (``encoder_features(encoder, ctx)`` in its ``run``)."""
    modules = list(encoder.members) if encoder.members else [encoder.module]
    module = modules[member]
    key = (encoder.fingerprint, id(module))
    return tuple(  # type: ignore[return-value]
        cached_features(
            ctx.feature_cache,
            (*key, which),
            module,
            getattr(ctx.dataset, which),
            encoder.mean,
            encoder.std,
            ctx.device,
        )
        for which in ("train", "test")
    )


__all__ = ["cached_features", "encoder_features", "extract_features"]
