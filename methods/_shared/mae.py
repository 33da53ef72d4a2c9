"""Masked auto-encoding maths (MAE, He et al. 2022; FedMAE docs/methods/fedmae.md §2.1): masks,
targets, the masked-patch loss."""

from __future__ import annotations

import torch

from benchmark.api import normalize_patches


def keep_count(num_patches: int, mask_ratio: float) -> int:
    """L_keep = ⌊L (1 − ρ)⌋ (MAE ``random_masking``)."""
    return int(num_patches * (1 - mask_ratio))


def random_patch_permutation(
    batch: int, num_patches: int, generator: torch.Generator, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """ids_shuffle = argsort(u), u ~ U(0, 1)^{B×L}, drawn on the CPU from ``generator``
    (device-independent)."""
    noise = torch.rand(batch, num_patches, generator=generator)
    return torch.argsort(noise, dim=1).to(device)


def masked_patch_mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """𝓛 = Σ_ij M_ij · (1/P)‖x̂_ij − t_ij‖² / Σ_ij M_ij: mean squared error over removed patches
    only."""
    per_patch = ((pred.float() - target.float()) ** 2).mean(dim=-1)
    return (per_patch * mask).sum() / mask.sum()


def mae_loss(
    pred: torch.Tensor,
    target_patches: torch.Tensor,
    mask: torch.Tensor,
    *,
    norm_pix_loss: bool = False,
) -> torch.Tensor:
    """FedMAE's client loss (docs/methods/fedmae.md §2.1 step 5; MAE ``forward_loss``)."""
    target = normalize_patches(target_patches) if norm_pix_loss else target_patches
    return masked_patch_mse(pred, target, mask)
