"""BYOL building blocks shared by FedU and FedEMA (docs/methods/fedu.md §2.1, §2.4): networks, loss,
lr schedule, local step.

Tensor layout (docs/methods/fedu.md §2.3): ``online.backbone.*``, ``online.projector.*``,
``predictor.*``, ``target.backbone.*``, ``target.projector.*``. The projector and predictor are
EasyFL's Linear → BN → ReLU → Linear (``model.py``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import mlp_head
from methods._shared.nets import BackboneHead

ENCODER_NAMES = ("backbone", "projector")


def byol_encoder(backbone: nn.Module, projector: nn.Module) -> BackboneHead:
    """f then g: backbone and projector (EasyFL replaces the ResNet ``fc`` with the projector)."""
    return BackboneHead(backbone, projector, ENCODER_NAMES)


class BYOLNet(nn.Module):
    """Online encoder θ, predictor h and target encoder ξ (same architecture as θ, never receives
    gradients)."""

    def __init__(self, online: BackboneHead, predictor: nn.Module, target: BackboneHead) -> None:
        super().__init__()
        self.online = online
        self.predictor = predictor
        self.target = target
        for p in self.target.parameters():
            p.requires_grad_(False)


def byol_heads(
    feat_dim: int, proj_hidden: int, proj_out: int, pred_hidden: int
) -> tuple[nn.Module, nn.Module]:
    """(projector g, predictor h): g = feat→hidden→out, h = out→hidden→out, each
    Linear-BN-ReLU-Linear."""
    return mlp_head(feat_dim, proj_hidden, proj_out), mlp_head(proj_out, pred_hidden, proj_out)


def byol_pair_loss(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """ℓ(p, z) = 2 − 2⟨p, z⟩ / (‖p‖‖z‖), per row (docs/methods/fedu.md §2.4 step 3). ℓ(p, p) = 0,
    ℓ(p, −p) = 4."""
    return 2.0 - 2.0 * (F.normalize(p.float(), dim=-1) * F.normalize(z.float(), dim=-1)).sum(dim=-1)


def byol_loss(
    p1: torch.Tensor, p2: torch.Tensor, z1: torch.Tensor, z2: torch.Tensor
) -> torch.Tensor:
    """𝓛 = (1/B) Σ_i [ℓ(p(v¹_i), sg z_ξ(v²_i)) + ℓ(p(v²_i), sg z_ξ(v¹_i))]; targets are detached
    here."""
    return (byol_pair_loss(p1, z2.detach()) + byol_pair_loss(p2, z1.detach())).mean()


def cosine_round_lr(base_lr: float, round_1based: int, num_rounds: int) -> float:
    """η_r = ½ η₀ (1 + cos(π (r − 1) / R)): constant within a round, cosine over rounds (EasyFL
    ``compute_lr``)."""
    return 0.5 * base_lr * (1.0 + math.cos(math.pi * (round_1based - 1) / num_rounds))


def byol_forward_loss(
    net: BYOLNet, v1: torch.Tensor, v2: torch.Tensor, *, target_alias: bool = False
) -> torch.Tensor:
    """One BYOL loss evaluation; each view is a separate forward (BN batch statistics over B, all
    nets in train mode). ``target_alias`` runs the target projections through the online encoder
    (EasyFL's first-round quirk)."""
    p1 = net.predictor(net.online(v1))
    p2 = net.predictor(net.online(v2))
    target = net.online if target_alias else net.target
    with torch.no_grad():
        z1, z2 = target(v1), target(v2)
    return byol_loss(p1, p2, z1, z2)
