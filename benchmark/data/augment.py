"""Batched SSL augmentations on uint8 tensors, on the model's device, with an explicit generator.

The papers' code runs torchvision's per-image PIL pipeline in data-loader workers. Here a whole batch is augmented
with a handful of tensor ops (one ``grid_sample`` for crop + flip + resize, vectorised colour ops, a grouped conv for
blur), which is what makes CPU tests cheap and GPU runs input-bound-free. Every random parameter is drawn on the CPU
from the caller's ``torch.Generator`` (so results do not depend on the device) and then moved to the batch's device.

Semantics follow torchvision's ``RandomResizedCrop``, ``RandomHorizontalFlip``, ``ColorJitter``, ``RandomGrayscale``
and ``GaussianBlur``; departures are marked DEVIATION.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from benchmark.data.views import normalize


@dataclass(frozen=True, kw_only=True)
class AugmentConfig:
    """SimCLR-style two-view augmentation (Chen et al. 2020, App. A); defaults are Dec-SSL's CIFAR pipeline."""

    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    interpolation: str = "bilinear"  # "bicubic" for Orchestra
    flip_p: float = 0.5
    jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)  # brightness, contrast, saturation, hue
    jitter_p: float = 0.8
    gray_p: float = 0.2
    blur_p: float = 0.0  # Dec-SSL: no blur on CIFAR
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    blur_kernel: int = 3


def _rand(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=gen)


def crop_boxes(n: int, height: int, width: int, cfg: AugmentConfig, gen: torch.Generator) -> torch.Tensor:
    """(n, 4) boxes (top, left, h, w) drawn as torchvision's RandomResizedCrop.get_params (10 tries, then centre)."""
    area = height * width
    tries = 10
    scale = cfg.crop_scale[0] + (cfg.crop_scale[1] - cfg.crop_scale[0]) * _rand(gen, n, tries)
    log_lo, log_hi = math.log(cfg.crop_ratio[0]), math.log(cfg.crop_ratio[1])
    ratio = torch.exp(log_lo + (log_hi - log_lo) * _rand(gen, n, tries))
    target = scale * area
    w = torch.round(torch.sqrt(target * ratio))
    h = torch.round(torch.sqrt(target / ratio))
    ok = (w > 0) & (h > 0) & (w <= width) & (h <= height)
    first = torch.where(ok.any(1), ok.float().argmax(1), torch.full((n,), -1))
    u_top, u_left = _rand(gen, n), _rand(gen, n)
    rows = torch.arange(n)
    hh = torch.where(first >= 0, h[rows, first.clamp(min=0)], torch.zeros(n))
    ww = torch.where(first >= 0, w[rows, first.clamp(min=0)], torch.zeros(n))
    # fallback: whole image clipped to the ratio range, centred (torchvision's behaviour)
    in_ratio = width / height
    if in_ratio < cfg.crop_ratio[0]:
        fw, fh = width, round(width / cfg.crop_ratio[0])
    elif in_ratio > cfg.crop_ratio[1]:
        fh, fw = height, round(height * cfg.crop_ratio[1])
    else:
        fw, fh = width, height
    fallback = first < 0
    hh = torch.where(fallback, torch.full((n,), float(fh)), hh)
    ww = torch.where(fallback, torch.full((n,), float(fw)), ww)
    # DEVIATION: torchvision draws the offset with randint(0, H - h + 1); we scale a uniform draw, equivalent in law.
    top = torch.floor(u_top * (height - hh + 1)).clamp(max=height - hh)
    left = torch.floor(u_left * (width - ww + 1)).clamp(max=width - ww)
    top = torch.where(fallback, torch.full((n,), float((height - fh) // 2)), top)
    left = torch.where(fallback, torch.full((n,), float((width - fw) // 2)), left)
    return torch.stack([top, left, hh, ww], dim=1)


def resized_crop(
    x: torch.Tensor, boxes: torch.Tensor, flip: torch.Tensor, size: int, mode: str = "bilinear"
) -> torch.Tensor:
    """Crop each image to its box, flip where ``flip``, and resize to ``size`` in one ``grid_sample``."""
    n, _, height, width = x.shape
    b = boxes.to(x.device, x.dtype)
    top, left, h, w = b.unbind(1)
    cx = (left + w / 2) / width * 2 - 1
    cy = (top + h / 2) / height * 2 - 1
    sx = w / width * torch.where(flip.to(x.device), -1.0, 1.0).to(x.dtype)
    sy = h / height
    # The affine map is a per-image scale and shift (no rotation), so the sampling grid is an outer sum of two
    # vectors: built by broadcasting instead of F.affine_grid's batched matmul (same values, a fraction of the cost).
    base = (torch.arange(size, device=x.device, dtype=x.dtype) * 2 + 1) / size - 1  # pixel centres, align_corners=False
    gx = (sx[:, None] * base[None, :] + cx[:, None])[:, None, :].expand(n, size, size)
    gy = (sy[:, None] * base[None, :] + cy[:, None])[:, :, None].expand(n, size, size)
    grid = torch.stack([gx, gy], dim=-1)
    out = F.grid_sample(x, grid, mode=mode, padding_mode="border", align_corners=False)
    return out.clamp_(0.0, 1.0) if mode == "bicubic" else out


def _gray(x: torch.Tensor) -> torch.Tensor:
    return (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3])


def _rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    r, g, b = x.unbind(1)
    maxc, _ = x.max(1)
    minc, _ = x.min(1)
    delta = maxc - minc
    s = torch.where(maxc > 0, delta / maxc.clamp(min=1e-12), torch.zeros_like(maxc))
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))
    rc, gc, bc = (maxc - r) / safe, (maxc - g) / safe, (maxc - b) / safe
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = torch.where(delta > 0, (h / 6.0) % 1.0, torch.zeros_like(h))
    return torch.stack([h, s, maxc], 1)


def _hsv_to_rgb(x: torch.Tensor) -> torch.Tensor:
    h, s, v = x.unbind(1)
    i = torch.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.long() % 6
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    table = torch.stack(
        [torch.stack(c, 1) for c in ((v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q))], 1
    )  # (n, 6, 3, H, W)
    idx = i[:, None, None].expand(-1, 1, 3, -1, -1)
    return table.gather(1, idx).squeeze(1)


def _shift_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """RGB -> HSV, h += shift (mod 1), -> RGB, as torchvision's adjust_hue, in a handful of fused-size ops.

    Same maths as ``_hsv_to_rgb(_rgb_to_hsv(x))`` with the hue shifted (S and V pass through: V = max, V·S = max - min),
    but the inverse uses the closed form c_n = V - V·S·clamp(min(k, 4 - k), 0, 1), k = (n + 6h) mod 6 for
    n = 5, 3, 1 (R, G, B) instead of gathering from a six-way table; equal up to float rounding (tested)."""
    r, g, b = x.unbind(1)
    maxc = torch.maximum(torch.maximum(r, g), b)  # elementwise over the three planes: cheaper than x.max(1)
    minc = torch.minimum(torch.minimum(r, g), b)
    delta = maxc - minc
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))
    # 6h in [-1, 5); where delta = 0 the hue is irrelevant (the output is V whatever k is), so no mask is needed
    h6 = torch.where(maxc == r, (g - b) / safe, torch.where(maxc == g, 2.0 + (b - r) / safe, 4.0 + (r - g) / safe))
    h6 = h6 + 6.0 * shift
    k = (torch.tensor([5.0, 3.0, 1.0], device=x.device, dtype=x.dtype).view(1, 3, 1, 1) + h6[:, None]) % 6.0
    return maxc[:, None] - delta[:, None] * torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)


def color_jitter(x: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator) -> torch.Tensor:
    """ColorJitter applied with probability ``jitter_p`` per image; factors drawn per image."""
    n = x.shape[0]
    bri, con, sat, hue = cfg.jitter
    apply = (_rand(gen, n) < cfg.jitter_p).to(x.device).view(n, 1, 1, 1)
    fb = (1 - bri + 2 * bri * _rand(gen, n)).to(x.device).view(n, 1, 1, 1)
    fc = (1 - con + 2 * con * _rand(gen, n)).to(x.device).view(n, 1, 1, 1)
    fs = (1 - sat + 2 * sat * _rand(gen, n)).to(x.device).view(n, 1, 1, 1)
    fh = (-hue + 2 * hue * _rand(gen, n)).to(x.device).view(n, 1, 1)
    # DEVIATION: torchvision draws a random order of the four ops per image; we draw one order per batch
    # (as kornia's ColorJiggle does), which keeps the op count constant. The per-image factors are unchanged.
    order = torch.randperm(4, generator=gen).tolist()
    y = x
    for op in order:
        # blends as torchvision's _blend(img, other, f) = f·img + (1 - f)·other, written as one lerp
        if op == 0 and bri > 0:
            y = (y * fb).clamp_(0, 1)
        elif op == 1 and con > 0:
            mean = _gray(y).mean(dim=(1, 2, 3), keepdim=True)
            y = torch.lerp(mean.expand_as(y), y, fc).clamp_(0, 1)
        elif op == 2 and sat > 0:
            y = torch.lerp(_gray(y).expand_as(y), y, fs).clamp_(0, 1)
        elif op == 3 and hue > 0:
            y = _shift_hue(y, fh)
    return torch.where(apply, y, x)


def random_grayscale(x: torch.Tensor, p: float, gen: torch.Generator) -> torch.Tensor:
    apply = (_rand(gen, x.shape[0]) < p).to(x.device).view(-1, 1, 1, 1)
    return torch.where(apply, _gray(x).expand_as(x), x)


def gaussian_blur(x: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator) -> torch.Tensor:
    n, c, h, w = x.shape
    apply = (_rand(gen, n) < cfg.blur_p).to(x.device)
    sigma = (cfg.blur_sigma[0] + (cfg.blur_sigma[1] - cfg.blur_sigma[0]) * _rand(gen, n)).to(x.device, x.dtype)
    k = cfg.blur_kernel
    r = torch.arange(k, device=x.device, dtype=x.dtype) - (k - 1) / 2
    kern = torch.exp(-(r[None, :] ** 2) / (2 * sigma[:, None] ** 2))
    kern = kern / kern.sum(1, keepdim=True)  # (n, k)
    kern = kern.repeat_interleave(c, 0)  # (n*c, k)
    pad = k // 2
    y = x.reshape(1, n * c, h, w)
    y = F.conv2d(F.pad(y, (pad, pad, 0, 0), mode="reflect"), kern.view(n * c, 1, 1, k), groups=n * c)
    y = F.conv2d(F.pad(y, (0, 0, pad, pad), mode="reflect"), kern.view(n * c, 1, k, 1), groups=n * c)
    return torch.where(apply.view(n, 1, 1, 1), y.view(n, c, h, w), x)


def augment(
    images: torch.Tensor,
    cfg: AugmentConfig,
    gen: torch.Generator,
    *,
    size: int | None = None,
    mean: tuple[float, ...],
    std: tuple[float, ...],
) -> torch.Tensor:
    """One augmented, normalised float view of a uint8 batch (N, 3, H, W) on its own device."""
    x = images.float().div_(255.0) if images.dtype == torch.uint8 else images
    n, _, height, width = x.shape
    size = size or width
    boxes = crop_boxes(n, height, width, cfg, gen)
    flip = _rand(gen, n) < cfg.flip_p
    x = resized_crop(x, boxes, flip, size, cfg.interpolation)
    if cfg.jitter_p > 0 and any(v > 0 for v in cfg.jitter):
        x = color_jitter(x, cfg, gen)
    if cfg.gray_p > 0:
        x = random_grayscale(x, cfg.gray_p, gen)
    if cfg.blur_p > 0:
        x = gaussian_blur(x, cfg, gen)
    return normalize(x, mean, std)


def two_views(
    images: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator, *, mean: tuple[float, ...], std: tuple[float, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent draws of the augmentation, as in SimCLR (the uint8 batch is converted to float once)."""
    x = images.float().div_(255.0) if images.dtype == torch.uint8 else images
    return augment(x, cfg, gen, mean=mean, std=std), augment(x, cfg, gen, mean=mean, std=std)
