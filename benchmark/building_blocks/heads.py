"""Network pieces and losses the built-in methods share, offered to every method (in-tree or an
installed plugin) through ``benchmark.api``: the MLP projection/prediction head and SimCLR's
NT-Xent. They live in the harness, not in ``methods/_shared`` (which re-exports them unchanged),
because a plugin may import nothing but ``benchmark.api``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.core.precision import fp32_math


def mlp_head(
    in_dim: int,
    hidden_dim: int,
    out_dim: int,
    *,
    num_layers: int = 2,
    bias_last: bool = True,
    bn_last: bool = False,
    bn_last_affine: bool = True,
    bn_hidden: bool = True,
    bias_hidden: bool = True,
) -> nn.Sequential:
    """Linear(in, h) [-BN] -ReLU … -Linear(h, out) [-BN(affine=bn_last_affine)].

    Dec-SSL projector: mlp_head(512, 512, 512). Orchestra f-SimCLR: bias_hidden=False, bn_last=True,
    affine False.
    """
    layers: list[nn.Module] = []
    dim = in_dim
    for _ in range(num_layers - 1):
        layers.append(nn.Linear(dim, hidden_dim, bias=bias_hidden))
        if bn_hidden:
            layers.append(nn.BatchNorm1d(hidden_dim))
        layers.append(nn.ReLU(inplace=True))
        dim = hidden_dim
    layers.append(nn.Linear(dim, out_dim, bias=bias_last))
    if bn_last:
        layers.append(nn.BatchNorm1d(out_dim, affine=bn_last_affine))
    return nn.Sequential(*layers)


@fp32_math  # the similarity matrix in fp32 under any autocast (benchmark.core.precision)
def ntxent_2b(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    """SimCLR NT-Xent over 2B views (docs/methods/fedavg_simclr.md §2.3, Dec-SSL
    ``SimCLR.forward``).

    L = 1/(2B) Σ_a −log( exp(s_{a,π(a)}/τ) / Σ_{b≠a} exp(s_ab/τ) ), s = cosine similarity, π(a) the
    other view: one cross-entropy over the 2B × 2B similarity matrix with the diagonal masked and
    target π(a).
    """
    # DEVIATION: the project's guidance prefers pytorch-metric-learning's NTXentLoss, which computes
    # exactly this value (the test uses it as an oracle), but it enumerates positive/negative pairs
    # and its cost grows with B³: 4 s per step at B = 256 on two CPU cores against milliseconds for
    # this O(B²) form (perf/run.py, P1).
    b = z1.shape[0]
    u = F.normalize(torch.cat([z1, z2]).float(), dim=1)
    logits = u @ u.t() / tau
    logits = logits.masked_fill(torch.eye(2 * b, dtype=torch.bool, device=u.device), float("-inf"))
    targets = torch.arange(2 * b, device=u.device).roll(b)
    return F.cross_entropy(logits, targets)
