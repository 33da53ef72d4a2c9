"""Feature extraction (docs/protocols/evaluation.md §2.2): fp32, eval mode, no augmentation, whole
split in index order, cached per (encoder, split) in the task context so kNN and the linear probe
share one pass."""

from __future__ import annotations

import torch
from torch import nn

from benchmark.api import DatasetSplit, normalize


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
        x = split.images[start : start + batch_size].to(device, non_blocking=True)
        feats.append(module(normalize(x, mean, std)).float().cpu())
    module.train(was_training)
    return torch.cat(feats) if feats else torch.zeros(0)


def cached_features(
    cache: dict, key: object, module: nn.Module, split: DatasetSplit, mean, std, device
) -> torch.Tensor:
    if key not in cache:
        cache[key] = extract_features(module, split, mean, std, device)
    return cache[key]
