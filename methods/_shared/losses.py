"""Contrastive losses (pure functions of embeddings). NT-Xent (``ntxent_2b``) lives in
``benchmark.building_blocks.heads`` so that plugins reach it through ``benchmark.api``; it is re-exported
here unchanged. pytorch-metric-learning's NTXentLoss is its reference oracle."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import NTXentLoss

# ntxent_2b: benchmark.building_blocks.heads, re-exported for the methods
from benchmark.api import fp32_math, ntxent_2b


def ntxent_2b_pml(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """The same loss through pytorch-metric-learning (labels [0..B-1, 0..B-1]); kept as the
    reference oracle."""
    labels = torch.arange(z1.shape[0], device=z1.device).repeat(2)
    return NTXentLoss(temperature=tau)(torch.cat([z1, z2]).float(), labels)


@fp32_math  # the similarity matrix in fp32 under any autocast (benchmark.core.precision)
def crossview_1dir(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """FLESD ``losses.py`` variant: logits u1 u2ᵀ / τ (B × B), cross-entropy with target i for row
    i, one direction."""
    u1, u2 = F.normalize(z1.float(), dim=1), F.normalize(z2.float(), dim=1)
    logits = u1 @ u2.t() / tau
    return F.cross_entropy(logits, torch.arange(z1.shape[0], device=z1.device))


CONTRASTIVE_LOSSES = {"ntxent_2b": ntxent_2b, "crossview_1dir": crossview_1dir}
