"""Projection and prediction heads built from block lists (lightly ``heads.py`` shape)."""

from __future__ import annotations

from torch import nn


def mlp_head(in_dim: int, hidden_dim: int, out_dim: int, *, num_layers: int = 2, bias_last: bool = True,
             bn_last: bool = False, bn_last_affine: bool = True, bn_hidden: bool = True,
             bias_hidden: bool = True) -> nn.Sequential:
    """Linear(in, h) [-BN] -ReLU … -Linear(h, out) [-BN(affine=bn_last_affine)].

    Dec-SSL projector: mlp_head(512, 512, 512). Orchestra f-SimCLR: bias_hidden=False, bn_last=True, affine False.
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
