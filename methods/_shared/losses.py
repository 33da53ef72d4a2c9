"""Contrastive losses (pure functions of embeddings). NT-Xent comes from pytorch-metric-learning."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import NTXentLoss


def ntxent_2b(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """SimCLR NT-Xent over 2B views (fedavg_simclr.md §2.3, Dec-SSL ``SimCLR.forward``).

    L = 1/(2B) Σ_a −log( exp(s_{a,π(a)}/τ) / Σ_{b≠a} exp(s_ab/τ) ), s = cosine similarity, π(a) the other view.
    pytorch-metric-learning's ``NTXentLoss`` with labels [0..B-1, 0..B-1] is exactly this: every anchor has one
    positive, the 2B−2 other views are its negatives, and the mean runs over the 2B positive pairs.
    """
    b = z1.shape[0]
    labels = torch.arange(b, device=z1.device).repeat(2)
    return NTXentLoss(temperature=tau)(torch.cat([z1, z2]).float(), labels)


def crossview_1dir(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """FLESD ``losses.py`` variant: logits u1 u2ᵀ / τ (B × B), cross-entropy with target i for row i, one direction."""
    u1, u2 = F.normalize(z1.float(), dim=1), F.normalize(z2.float(), dim=1)
    logits = u1 @ u2.t() / tau
    return F.cross_entropy(logits, torch.arange(z1.shape[0], device=z1.device))


CONTRASTIVE_LOSSES = {"ntxent_2b": ntxent_2b, "crossview_1dir": crossview_1dir}
