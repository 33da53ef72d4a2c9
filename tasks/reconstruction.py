"""``recon/mae@v1`` (docs/protocols/evaluation.md §5): masked-patch reconstruction error of an
exported masked auto-encoder.

A project addition for FedMAE, which shows reconstructions only qualitatively (Fig. 1); no reference
numbers exist. Held-out images (the dataset's test split, optionally its first ``max_images`` in
index order) are masked at ρ = 0.75 on the model's patch grid with masks that depend only on
(mask_seed, image index, grid): for image i the visible patches are the first 25 % of
``default_rng(SeedSequence([mask_seed, i])).permutation(L)``, so every model with the same grid sees
the same masks. Predictions are un-normalised to [0, 1] RGB (target space ``pixel``) and compared
with the original image on the masked patches: MSE_i over masked pixels and channels, PSNR_i = 10
log10(1 / max(MSE_i, 1e-10)); the dataset means are reported, plus the visible-patch MSE as a
diagnostic. Space ``normpix`` (models trained on per-patch normalised targets) reports MSE in that
space only, no PSNR.

The encoder must export the auto-encoder as ``Encoder.extras["mae"]``: a module with ``patch_size``,
``num_patches``, ``norm_pix_loss`` and ``forward_masked(x, ids_shuffle, len_keep) -> (pred (B, L,
p²·3), mask)``. Encoders without one raise ``TaskNotApplicable``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch

from benchmark.api import (
    Encoder,
    ProtocolCard,
    TaskContext,
    TaskNotApplicable,
    normalize,
    normalize_patches,
    patchify,
)
from benchmark.api import portable_math as pmath
from tasks.cards import load_card
from tasks.task_base import Scored, TaskBase


def recon_masks(num_images: int, num_patches: int, mask_seed: int, start: int = 0) -> torch.Tensor:
    """(n, L) permutations; row j belongs to image ``start + j`` (fixed per image index, grid and
    seed)."""
    rows = [
        np.random.default_rng(np.random.SeedSequence([mask_seed, start + j])).permutation(
            num_patches
        )
        for j in range(num_images)
    ]
    return torch.as_tensor(np.stack(rows) if rows else np.zeros((0, num_patches)), dtype=torch.long)


def unnormalize_patches(
    pred: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]
) -> torch.Tensor:
    """Undo per-channel input normalisation on patchified predictions (channel is the fastest
    index)."""
    c = len(mean)
    m = torch.tensor(mean, dtype=pred.dtype, device=pred.device)
    s = torch.tensor(std, dtype=pred.dtype, device=pred.device)
    b, L, d = pred.shape
    return (pred.reshape(b, L, d // c, c) * s + m).reshape(b, L, d)


def per_image_mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) mean over the patches where ``mask`` is 1 (and all their values) of (pred − target)²."""
    per_patch = ((pred.double() - target.double()) ** 2).mean(dim=-1)
    m = mask.double()
    return (per_patch * m).sum(1) / m.sum(1)


def psnr(mse: torch.Tensor, floor: float = 1e-10) -> torch.Tensor:
    """10 log10(1 / max(MSE, 1e-10)) dB for targets in [0, 1] (100 dB for a perfect
    reconstruction)."""
    return 10.0 * pmath.log10(1.0 / mse.clamp(min=floor))


@dataclass(frozen=True, kw_only=True)
class ReconstructionConfig:
    mask_ratio: float = 0.75  # ρ, as in pre-training
    mask_seed: int = 0
    space: Literal["pixel", "normpix"] = "pixel"
    max_images: int = 0  # 0 = the whole test split; n = its first n images in index order
    batch_size: int = 256

    def __post_init__(self) -> None:
        if not 0 < self.mask_ratio < 1 or self.batch_size < 1 or self.max_images < 0:
            raise ValueError("mask_ratio in (0, 1), batch_size >= 1, max_images >= 0")


class Reconstruction(TaskBase):
    """Masked-patch MSE / PSNR on held-out images (docs/protocols/evaluation.md §5, card
    ``recon/mae@v1``)."""

    name: ClassVar[str] = "reconstruction"
    reads_partition: ClassVar[bool] = False  # the cell's dataset splits only
    main_metric: ClassVar[str] = "mse"
    higher_is_better: ClassVar[bool] = False
    Config: ClassVar[type] = ReconstructionConfig

    def card(self) -> ProtocolCard:
        c = self.cfg
        # tasks/cards/recon_mae@v1.json + this config
        return load_card("recon/mae@v1").protocol_card(
            {
                "subset": "first max_images in index order" if c.max_images else "all",
                "max_images": c.max_images,
                "mask_ratio": c.mask_ratio,
                "mask_seed": c.mask_seed,
                "space": c.space,
                "metric": "mean over images of masked-pixel MSE"
                + (" and PSNR (dB, floor 1e-10)" if c.space == "pixel" else ""),
            },
            summary=f"masked reconstruction rho={c.mask_ratio} ({c.space}), final",
        )

    @torch.no_grad()
    def score(self, encoder: Encoder, ctx: TaskContext) -> Scored:
        model = dict(getattr(encoder, "extras", {}) or {}).get("mae")
        if model is None:
            raise TaskNotApplicable(
                "the encoder exports no masked auto-encoder (Encoder.extras['mae'])"
            )
        norm_pix = bool(getattr(model, "norm_pix_loss", False))
        if norm_pix != (self.cfg.space == "normpix"):
            raise TaskNotApplicable(
                f"space {self.cfg.space!r} does not match a model trained with "
                f"norm_pix_loss={norm_pix}"
            )
        split = ctx.dataset.test
        n = len(split) if not self.cfg.max_images else min(self.cfg.max_images, len(split))
        p, L = int(model.patch_size), int(model.num_patches)
        len_keep = int(L * (1 - self.cfg.mask_ratio))
        was_training = model.training
        model.eval().to(ctx.device)
        mse_m, mse_v, psnrs = [], [], []
        for start in range(0, n, self.cfg.batch_size):
            imgs = split.images[start : min(start + self.cfg.batch_size, n)].to(ctx.device)
            x = normalize(imgs, encoder.mean, encoder.std)
            ids = recon_masks(imgs.shape[0], L, self.cfg.mask_seed, start).to(ctx.device)
            pred, mask = model.forward_masked(x, ids, len_keep)
            pred = pred.float()
            if self.cfg.space == "pixel":
                pred = unnormalize_patches(pred, encoder.mean, encoder.std)
                target = patchify(imgs.float() / 255.0, p)
            else:
                target = normalize_patches(patchify(x, p))
            m = per_image_mse(pred, target, mask)
            mse_m.append(m.cpu())
            mse_v.append(per_image_mse(pred, target, 1 - mask).cpu())
            psnrs.append(psnr(m).cpu())
        model.train(was_training)
        mse = torch.cat(mse_m)
        values = {"mse": float(mse.mean()), "mse_visible": float(torch.cat(mse_v).mean())}
        if self.cfg.space == "pixel":
            values["psnr"] = float(torch.cat(psnrs).mean())
        subset = hashlib.sha256(np.arange(n, dtype=np.int64).tobytes()).hexdigest()[:16]
        return values, {
            "num_images": n,
            "subset_digest": subset,
            "num_patches": L,
            "len_keep": len_keep,
        }
