"""Batched SSL augmentations on uint8 tensors, on the model's device, with an explicit generator.

The papers' code runs torchvision's per-image PIL pipeline in data-loader workers. Here a whole
batch is augmented with a handful of tensor ops (one ``grid_sample`` for crop + flip + resize,
vectorised colour ops, a grouped conv for blur), which is what makes CPU tests cheap and GPU runs
input-bound-free. Every random parameter is drawn first, on the CPU, from the caller's
``torch.Generator`` (``draw``; results do not depend on the device), then the view is built: each
colour op runs only on the images it was drawn for (index_select, in-place arithmetic, index_copy_),
and on the CPU in chunks of images small enough to be recycled by the allocator instead of
page-faulted in afresh (issue 10, P2; profile in docs/performance.md).

On an accelerator the host never waits for it: every value the device needs (crop boxes, flips,
jitter factors, hue offsets, blur sigmas, the indices of the images each op runs on, the
normalisation constants) is computed on the host from the draws and sent in one non-blocking copy
per call (``_Shipment``; ``two_views``: one for both views), and nothing is read back (issue 45).
The values and the arithmetic are the same on every device, op for op.

Semantics follow torchvision's ``RandomResizedCrop``, ``RandomHorizontalFlip``, ``ColorJitter``,
``RandomGrayscale`` and ``GaussianBlur``; departures are marked DEVIATION.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F

from benchmark.contracts.method import Inert
from benchmark.core.host_to_device import Parcel, Received, Shipment
from benchmark.portable import math_ops as pmath


@dataclass(frozen=True, kw_only=True)
class AugmentConfig:
    """SimCLR-style two-view augmentation (Chen et al. 2020, App. A); defaults are Dec-SSL's CIFAR
    pipeline."""

    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    interpolation: Literal["bilinear", "bicubic", "nearest"] = "bilinear"  # "bicubic": Orchestra
    flip_p: float = 0.5
    # brightness, contrast, saturation, hue
    jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)
    jitter_p: float = 0.8
    gray_p: float = 0.2
    blur_p: float = 0.0  # Dec-SSL: no blur on CIFAR
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    blur_kernel: int = 3

    # fields read only under a condition on the others, declared here once for every method whose
    # config holds an AugmentConfig (benchmark.commands.live_settings re-roots them under the
    # method's field: ``augment.blur_sigma`` with ``live_with={"augment": {"blur_p": 0.5}}``). Not
    # dataclass fields: no cell id, record or digest sees them
    inert_settings: ClassVar[Mapping[str, Inert]] = {
        name: Inert(
            "the Gaussian blur is drawn only when blur_p > 0 (the default 0 blurs nothing)",
            live_with={"blur_p": 0.5},
        )
        for name in ("blur_sigma", "blur_kernel")
    }


def _rand(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=gen)


def fallback_size(height: int, width: int, ratio: tuple[float, float]) -> tuple[int, int]:
    """(h, w) of the crop taken when no try fits: the whole image clipped to the ratio range, to be
    centred (torchvision's behaviour)."""
    in_ratio = width / height
    if in_ratio < ratio[0]:
        return round(width / ratio[0]), width
    if in_ratio > ratio[1]:
        return height, round(height * ratio[1])
    return height, width


def crop_boxes(
    n: int, height: int, width: int, cfg: AugmentConfig, gen: torch.Generator
) -> torch.Tensor:
    """(n, 4) boxes (top, left, h, w) drawn as torchvision's RandomResizedCrop.get_params (10 tries,
    then centre).

    The arithmetic that rounds (scale, ratio, the sides, the offsets) is ATen's on the drawn
    tensors; what only compares and selects (which try fits, the fallback) is NumPy's on the same
    values, which rounds nothing (issue 53: a few dozen tiny tensor calls a view; the kernel census
    keeps every call that rounds, shape for shape)."""
    area = height * width
    tries = 10
    scale = cfg.crop_scale[0] + (cfg.crop_scale[1] - cfg.crop_scale[0]) * _rand(gen, n, tries)
    log_lo, log_hi = math.log(cfg.crop_ratio[0]), math.log(cfg.crop_ratio[1])
    ratio = pmath.exp(log_lo + (log_hi - log_lo) * _rand(gen, n, tries))
    target = scale * area
    w = np.rint(pmath.sqrt(target * ratio).numpy())  # round half to even, as torch.round
    h = np.rint(pmath.sqrt(target / ratio).numpy())
    ok = (w > 0) & (h > 0) & (w <= width) & (h <= height)
    found = ok.any(1)
    first = ok.argmax(1)  # the first try that fits (0 where none does: not read then)
    u_top, u_left = _rand(gen, n), _rand(gen, n)
    rows = np.arange(n)
    fh, fw = fallback_size(height, width, cfg.crop_ratio)
    hh = torch.from_numpy(np.where(found, h[rows, first], np.float32(fh)))
    ww = torch.from_numpy(np.where(found, w[rows, first], np.float32(fw)))
    # DEVIATION: torchvision draws the offset with randint(0, H - h + 1); we scale a uniform draw,
    # equivalent in law.
    room_h, room_w = height - hh, width - ww
    top = torch.floor(u_top * (room_h + 1)).clamp(max=room_h).numpy()
    left = torch.floor(u_left * (room_w + 1)).clamp(max=room_w).numpy()
    top = np.where(found, top, np.float32((height - fh) // 2))
    left = np.where(found, left, np.float32((width - fw) // 2))
    return torch.from_numpy(np.stack([top, left, hh.numpy(), ww.numpy()], axis=1))


def resized_crop(
    x: torch.Tensor, boxes: torch.Tensor, flip: torch.Tensor, size: int, mode: str = "bilinear"
) -> torch.Tensor:
    """Crop each image to its box, flip where ``flip``, and resize to ``size`` in one
    ``grid_sample``."""
    n, _, height, width = x.shape
    b = boxes.to(x.device, x.dtype)
    top, left, h, w = b.unbind(1)
    cx = (left + w / 2) / width * 2 - 1
    cy = (top + h / 2) / height * 2 - 1
    sx = w / width * torch.where(flip.to(x.device), -1.0, 1.0).to(x.dtype)
    sy = h / height
    # The affine map is a per-image scale and shift (no rotation), so the sampling grid is an outer
    # sum of two vectors: built by broadcasting instead of F.affine_grid's batched matmul (same
    # values, a fraction of the cost).
    # pixel centres, align_corners=False
    base = (torch.arange(size, device=x.device, dtype=x.dtype) * 2 + 1) / size - 1
    grid = torch.empty(n, size, size, 2, device=x.device, dtype=x.dtype)
    grid[..., 0] = (sx[:, None] * base[None, :] + cx[:, None])[:, None, :]  # x varies along columns
    grid[..., 1] = (sy[:, None] * base[None, :] + cy[:, None])[:, :, None]  # y along rows
    out = F.grid_sample(x, grid, mode=mode, padding_mode="border", align_corners=False)
    return out.clamp_(0.0, 1.0) if mode == "bicubic" else out


# ITU-R 601-2, PIL's convert("L") (torchvision's tensor path rounds 0.299 to 0.2989)
_LUMA = (0.299, 0.587, 0.114)


def _gray_into(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The luma plane (n, H, W) of ``x`` (0.299 r + 0.587 g + 0.114 b) written into ``out``, without
    temporaries."""
    torch.mul(x[:, 0], _LUMA[0], out=out)
    out.add_(x[:, 1], alpha=_LUMA[1])
    return out.add_(x[:, 2], alpha=_LUMA[2])


def _rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """Reference RGB -> HSV (the tests' oracle for the hue shift; not on the hot path)."""
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
    """Reference HSV -> RGB by torchvision's six-way table (the tests' oracle; not on the hot
    path)."""
    h, s, v = x.unbind(1)
    i = torch.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.long() % 6
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    table = torch.stack(
        [
            torch.stack(c, 1)
            for c in ((v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q))
        ],
        1,
    )  # (n, 6, 3, H, W)
    idx = i[:, None, None].expand(-1, 1, 3, -1, -1)
    return table.gather(1, idx).squeeze(1)


def hue_offsets(shift: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(n, 3) per-image offsets n - 2 + 6·shift (n = 5, 3, 1: R, G, B) of ``_shift_hue_``, computed
    on the host (``shift`` (n,) in turns, any device: the tests' and direct callers' way in)."""
    n = shift.numel()
    return torch.tensor([3.0, 1.0, -1.0]).view(1, 3) + 6.0 * shift.to("cpu", dtype).view(n, 1)


def _shift_hue_(x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """In place: RGB -> HSV, h += shift (mod 1, in turns), -> RGB, as torchvision's adjust_hue;
    ``offsets`` = ``hue_offsets(shift)``, already on ``x``'s device when it comes from a shipment.

    S and V pass through (V = max, V·S = max - min = delta), so only the hue is computed: 6h = N /
    delta with N = g - b, 2·delta + b - r or 4·delta + r - g where r, g or b is the first maximum
    (torchvision's _rgb2hsv order), selected by multiplying with 0/1 float masks (exact) rather than
    torch.where (10x slower on this CPU). The inverse is the closed form c_n = V -
    delta·clamp(min(k, 4 - k), 0, 1), k = (n + 6h) mod 6 for n = 5, 3, 1 (R, G, B), written with u =
    k - 2 wrapped to [-3, 3] as c_n = min + delta·clamp(|u| - 1, 0, 1), instead of gathering from
    torchvision's six-way table: the same maths up to float rounding (tested against torchvision)."""
    n = x.shape[0]
    r, g, b = x.unbind(1)
    vmax = torch.maximum(torch.maximum(r, g), b)
    vmin = torch.minimum(torch.minimum(r, g), b)
    delta = vmax - vmin
    # eq into a float tensor: 0/1 masks, vectorised
    m_r = torch.eq(r, vmax, out=torch.empty_like(vmax))
    m_g = torch.eq(g, vmax, out=torch.empty_like(vmax))
    m_g.addcmul_(m_g, m_r, value=-1.0)  # g is the maximum and r is not
    m_b = (m_r + m_g).neg_().add_(1.0)
    h6 = (g - b).mul_(m_r)
    h6.addcmul_(m_g, (b - r).add_(delta, alpha=2.0))
    h6.addcmul_(m_b, (r - g).add_(delta, alpha=4.0))
    # where delta = 0 the numerator is 0 and the output is the grey level whatever the hue: any
    # divisor > 0 will do
    h6.div_(delta.clamp(min=1e-20))
    # RGB no longer needed
    u = torch.add(h6.unsqueeze(1), offsets.to(x.device, x.dtype).view(n, 3, 1, 1), out=x)
    # wrap to [-3, 3]; the result is continuous at the seams
    u.sub_(torch.mul(u, 1.0 / 6.0).round_(), alpha=6.0)
    return u.abs_().sub_(1.0).clamp_(0.0, 1.0).mul_(delta.unsqueeze(1)).add_(vmin.unsqueeze(1))


def _shift_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Out-of-place ``_shift_hue_`` (``shift`` of any shape holding one value per image)."""
    return _shift_hue_(x.clone(), hue_offsets(shift.reshape(-1), x.dtype))


@dataclass(frozen=True)
class Draws:
    """Every random parameter of one augmented view of a batch of n images (all on the CPU).

    Drawn from the generator in this order: crop boxes, flip, jitter (apply, brightness, contrast,
    saturation, hue factors, op order), grayscale, blur (apply, sigma); a stage whose probability or
    strength is zero draws nothing."""

    boxes: torch.Tensor  # (n, 4) top, left, h, w
    flip: torch.Tensor  # (n,) bool
    jitter: torch.Tensor | None  # (n,) bool: ColorJitter applies
    # (n, 4) brightness, contrast, saturation factors, hue shift (turns)
    factors: torch.Tensor | None
    order: torch.Tensor | None  # (n, 4) long: each image's order of the four jitter ops
    gray: torch.Tensor | None  # (n,) bool
    blur: torch.Tensor | None  # (n,) bool
    sigma: torch.Tensor | None  # (n,)

    def rows(self, sl: slice) -> Draws:
        def cut(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[sl]

        return Draws(
            self.boxes[sl],
            self.flip[sl],
            cut(self.jitter),
            cut(self.factors),
            cut(self.order),
            cut(self.gray),
            cut(self.blur),
            cut(self.sigma),
        )


def draw(n: int, height: int, width: int, cfg: AugmentConfig, gen: torch.Generator) -> Draws:
    boxes = crop_boxes(n, height, width, cfg, gen)
    flip = _rand(gen, n) < cfg.flip_p
    jitter = factors = order = None
    if cfg.jitter_p > 0 and any(v > 0 for v in cfg.jitter):
        bri, con, sat, hue = cfg.jitter
        jitter = _rand(gen, n) < cfg.jitter_p
        fb = 1 - bri + 2 * bri * _rand(gen, n)
        fc = 1 - con + 2 * con * _rand(gen, n)
        fs = 1 - sat + 2 * sat * _rand(gen, n)
        fh = -hue + 2 * hue * _rand(gen, n)
        factors = torch.stack([fb, fc, fs, fh], 1)
        # torchvision's ColorJitter draws a fresh permutation of the four ops for every image
        # (randperm(4) per call); the argsort of four uniforms is a uniform permutation too, drawn
        # for all n images at once
        order = torch.argsort(_rand(gen, n * 4).view(n, 4), dim=1)
    gray = _rand(gen, n) < cfg.gray_p if cfg.gray_p > 0 else None
    blur = sigma = None
    if cfg.blur_p > 0:
        blur = _rand(gen, n) < cfg.blur_p
        sigma = cfg.blur_sigma[0] + (cfg.blur_sigma[1] - cfg.blur_sigma[0]) * _rand(gen, n)
    return Draws(boxes, flip, jitter, factors, order, gray, blur, sigma)


@dataclass(frozen=True)
class _Rows:
    """The images an op runs on: how many of how many (known on the host) and, when it is some but
    not all of them, their indices (a parcel of the shipment)."""

    count: int
    total: int
    index: Parcel | None


def _select(apply: torch.Tensor, ship: Shipment) -> tuple[_Rows, torch.Tensor]:
    """``apply`` (host bool) as rows to ship, and the host row numbers."""
    rows = apply.nonzero().squeeze(1)
    n, total = int(rows.numel()), int(apply.numel())
    return _Rows(n, total, ship.add(rows) if 0 < n < total else None), rows


def _on_rows(x: torch.Tensor, sel: _Rows | None, got: Received, fn) -> torch.Tensor:
    """``fn(images)`` on the selected images, in place on ``x``: the whole batch when every image is
    selected, else index_select -> fn -> index_copy_ (no work on the images an op skips)."""
    if sel is None or sel.count == 0:
        return x
    if sel.count == sel.total:
        return fn(x)
    idx = got[sel.index]
    return x.index_copy_(0, idx, fn(x.index_select(0, idx)))


def _brightness_(y: torch.Tensor, f: torch.Tensor, luma: torch.Tensor) -> torch.Tensor:
    return y.mul_(f.view(-1, 1, 1, 1)).clamp_(0.0, 1.0)


def _contrast_(y: torch.Tensor, f: torch.Tensor, luma: torch.Tensor) -> torch.Tensor:
    # mean of the grey image = the luma-weighted sum of the channel means (linear)
    mean = (y.mean(dim=(2, 3)) * luma).sum(1)
    return y.mul_(f.view(-1, 1, 1, 1)).add_(((1.0 - f) * mean).view(-1, 1, 1, 1)).clamp_(0.0, 1.0)


def _saturation_(y: torch.Tensor, f: torch.Tensor, luma: torch.Tensor) -> torch.Tensor:
    plane = _gray_into(y, y.new_empty(y.shape[0], y.shape[2], y.shape[3]))
    plane.mul_((1.0 - f).view(-1, 1, 1))
    return y.mul_(f.view(-1, 1, 1, 1)).add_(plane.unsqueeze(1)).clamp_(0.0, 1.0)


def _hue_(y: torch.Tensor, offsets: torch.Tensor, luma: torch.Tensor) -> torch.Tensor:
    return _shift_hue_(y, offsets)


_JITTER_OPS = (_brightness_, _contrast_, _saturation_, _hue_)


@dataclass(frozen=True)
class _JitterStep:
    """One jitter op in one slot of the per-image order: the images (of the jittered sub-batch)
    that have it there, ``count`` of ``total``, and where their row numbers and factors (hue: their
    offsets, ``hue_offsets``) sit in the plan's parcels (``_JitterPlan``): ``lo:lo + count`` of the
    factors or of the hue offsets (every row when ``count == total``: no index then)."""

    op: int
    count: int
    total: int
    lo: int


@dataclass(frozen=True)
class _JitterPlan:
    """A view's jitter steps and the shipment's three parcels that hold every step's values: the
    images' row numbers, the scalar factors (brightness, contrast, saturation) and the hue offsets
    ((count, 3) a step), each step's run at its ``lo`` (in the hue array for the hue steps)."""

    steps: tuple[_JitterStep, ...]
    rows: Parcel
    factors: Parcel
    hue: Parcel
    hue_from: int  # where the hue steps' rows start in ``rows``


def _plan_jitter(
    factors: torch.Tensor, order: torch.Tensor, cfg: AugmentConfig, dtype, ship: Shipment
) -> _JitterPlan:
    """ColorJitter's steps for the jittered images' ``factors`` (m, 4) and ``order`` (m, 4), on
    the host: slot by slot, each op on the images that have it in that slot (every op is per image,
    so this is each image's own order: at most 4 x 4 batched calls, whatever the batch size).

    The rows of each step are found with NumPy on the host (ascending, as ``nonzero``), and every
    step's rows and factors go in one parcel each instead of two parcels a step: the same values,
    read on the device once a view (issue 53: the planning was a few hundred tiny tensor calls a
    view)."""
    f = factors.to(dtype)
    o = order.numpy()
    m = int(o.shape[0])
    steps: list[_JitterStep] = []
    # the scalar ops' rows (and which op, for their factors), then the hue steps' rows
    scalar_rows, scalar_ops, hue_rows = [], [], []
    n_scalar = n_hue = 0
    for slot in range(4):
        for op, strength in enumerate(cfg.jitter):
            if strength <= 0:
                continue
            host = np.flatnonzero(o[:, slot] == op)
            count = int(host.size)
            if count == 0:
                continue
            if op == 3:
                steps.append(_JitterStep(op, count, m, n_hue))
                hue_rows.append(host)
                n_hue += count
            else:
                steps.append(_JitterStep(op, count, m, n_scalar))
                scalar_rows.append(host)
                scalar_ops.append(np.full(count, op))
                n_scalar += count
    s_rows = torch.from_numpy(np.concatenate(scalar_rows) if scalar_rows else _NO_ROWS)
    s_ops = torch.from_numpy(np.concatenate(scalar_ops) if scalar_ops else _NO_ROWS)
    h_rows = torch.from_numpy(np.concatenate(hue_rows) if hue_rows else _NO_ROWS)
    # each hue step's offsets computed on its own rows, as before (the same ATen calls, shape for
    # shape: the kernel census, benchmark.commands.kernel_census)
    offsets = [hue_offsets(f[torch.from_numpy(h), 3], dtype) for h in hue_rows]
    return _JitterPlan(
        tuple(steps),
        ship.add(torch.cat([s_rows, h_rows])),
        ship.add(f[s_rows, s_ops], dtype),
        ship.add(torch.cat(offsets) if offsets else torch.zeros(0, 3, dtype=dtype), dtype),
        n_scalar,
    )


_NO_ROWS = np.zeros(0, dtype=np.int64)


def color_jitter_(
    y: torch.Tensor, plan: _JitterPlan, got: Received, luma: torch.Tensor
) -> torch.Tensor:
    """ColorJitter in place on ``y`` (m, 3, H, W) by the planned steps (``_plan_jitter``).

    Each op is torchvision's on float images: _blend(img, other, f) = clamp(f·img + (1 - f)·other,
    0, 1) with other = 0 (brightness), the mean of the grey image (contrast) or the grey image
    (saturation), then adjust_hue. Written as in-place multiply-adds with per-image scalars: the
    same maths up to float rounding (tested against torchvision.transforms.functional)."""
    if not plan.steps:
        return y
    rows, factors, hue = got[plan.rows], got[plan.factors], got[plan.hue]
    for s in plan.steps:
        lo = s.lo + (plan.hue_from if s.op == 3 else 0)
        # a fresh tensor of the step's values (as a parcel of its own was): the ops see the
        # shapes, strides and offsets they saw before (the kernel census)
        value = (hue if s.op == 3 else factors)[s.lo : s.lo + s.count].clone()
        if s.count == s.total:
            _JITTER_OPS[s.op](y, value, luma)
        else:
            idx = rows[lo : lo + s.count]
            y.index_copy_(0, idx, _JITTER_OPS[s.op](y.index_select(0, idx), value, luma))
    return y


def grayscale_(y: torch.Tensor) -> torch.Tensor:
    """RandomGrayscale's transform (3 output channels) in place."""
    gray = _gray_into(y, y.new_empty(y.shape[0], y.shape[2], y.shape[3]))
    return y.copy_(gray.unsqueeze(1).expand_as(y))


def gaussian_blur_(y: torch.Tensor, sigma: torch.Tensor, k: int) -> torch.Tensor:
    """GaussianBlur with a k-tap kernel of per-image ``sigma`` (reflect padding, separable), in
    place on ``y``."""
    m, c, h, w = y.shape
    sigma = sigma.to(y.device, y.dtype)
    r = torch.arange(k, device=y.device, dtype=y.dtype) - (k - 1) / 2
    kern = pmath.exp(-(r[None, :] ** 2) / (2 * sigma[:, None] ** 2))
    kern = kern / kern.sum(1, keepdim=True)  # (m, k)
    kern = kern.repeat_interleave(c, 0)  # (m*c, k)
    pad = k // 2
    z = y.reshape(1, m * c, h, w)
    z = F.conv2d(
        F.pad(z, (pad, pad, 0, 0), mode="reflect"), kern.view(m * c, 1, 1, k), groups=m * c
    )
    z = F.conv2d(
        F.pad(z, (0, 0, pad, pad), mode="reflect"), kern.view(m * c, 1, k, 1), groups=m * c
    )
    return y.copy_(z.view(m, c, h, w))


_CHUNK_BYTES = 3 << 20


def _chunk(n: int, size: int, device: torch.device) -> int:
    """Images per chunk. On the CPU the view is built in slices of at most ~3 MB per float tensor: a
    larger fresh tensor is mmap'ed by the allocator and page-faulted on first touch (measured: that
    costs more than the arithmetic of an elementwise op), while smaller ones are recycled from the
    heap and stay in cache. One chunk elsewhere."""
    if device.type != "cpu":
        return n
    return max(1, min(n, _CHUNK_BYTES // (3 * size * size * 4)))


@dataclass(frozen=True)
class _ViewPlan:
    """Everything one chunk of one view needs, decided on the host from its draws: the counts that
    shape the work, and parcels of the shipment for the values the device reads."""

    boxes: Parcel
    flip: Parcel
    jitter: _Rows | None
    jitter_steps: _JitterPlan | None
    gray: _Rows | None
    blur: _Rows | None
    sigma: Parcel | None


def _plan_view(d: Draws, cfg: AugmentConfig, dtype: torch.dtype, ship: Shipment) -> _ViewPlan:
    jitter = steps = gray = blur = sigma = None
    if d.jitter is not None:
        jitter, rows = _select(d.jitter, ship)
        steps = _plan_jitter(d.factors[rows], d.order[rows], cfg, dtype, ship)
    if d.gray is not None:
        gray, _ = _select(d.gray, ship)
    if d.blur is not None:
        blur, rows = _select(d.blur, ship)
        sigma = ship.add(d.sigma[rows], dtype)
    return _ViewPlan(ship.add(d.boxes, dtype), ship.add(d.flip), jitter, steps, gray, blur, sigma)


@dataclass(frozen=True)
class _Constants:
    mean: Parcel
    std: Parcel
    luma: Parcel


def _constants(
    mean: tuple[float, ...], std: tuple[float, ...], dtype: torch.dtype, ship: Shipment
) -> _Constants:
    return _Constants(ship.add(mean, dtype), ship.add(std, dtype), ship.add(_LUMA, dtype))


def _view(
    x: torch.Tensor, plan: _ViewPlan, got: Received, consts: _Constants, cfg: AugmentConfig, size
) -> torch.Tensor:
    luma = got[consts.luma]
    # a fresh tensor: the ops below work in place
    y = resized_crop(x, got[plan.boxes], got[plan.flip], size, cfg.interpolation)
    y = _on_rows(y, plan.jitter, got, lambda v: color_jitter_(v, plan.jitter_steps, got, luma))
    y = _on_rows(y, plan.gray, got, grayscale_)
    if plan.blur is not None:
        sigma = got[plan.sigma]
        y = _on_rows(y, plan.blur, got, lambda v: gaussian_blur_(v, sigma, cfg.blur_kernel))
    # normalize(), in place
    return y.sub_(got[consts.mean].view(1, -1, 1, 1)).div_(got[consts.std].view(1, -1, 1, 1))


def _plan(
    x: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator, size: int, ship: Shipment
) -> tuple[tuple[slice, _ViewPlan], ...]:
    """Draw one view's parameters (``draw``) and plan it chunk by chunk (``_chunk``)."""
    n, _, height, width = x.shape
    d = draw(n, height, width, cfg, gen)
    step = _chunk(n, size, x.device)
    return tuple(
        (sl, _plan_view(d.rows(sl) if step < n else d, cfg, x.dtype, ship))
        for sl in (slice(lo, min(n, lo + step)) for lo in range(0, n, step))
    )


def _build(
    x: torch.Tensor, plans, got: Received, consts: _Constants, cfg: AugmentConfig, size: int
) -> torch.Tensor:
    """The view from its planned chunks; the result does not depend on the chunking, since every
    op is per image."""
    if len(plans) == 1:
        return _view(x, plans[0][1], got, consts, cfg, size)
    out = torch.empty(x.shape[0], x.shape[1], size, size, device=x.device, dtype=x.dtype)
    for sl, plan in plans:
        out[sl] = _view(x[sl], plan, got, consts, cfg, size)
    return out


def _as_float(images: torch.Tensor) -> torch.Tensor:
    return images.float().div_(255.0) if images.dtype == torch.uint8 else images


def augment(
    images: torch.Tensor,
    cfg: AugmentConfig,
    gen: torch.Generator,
    *,
    size: int | None = None,
    mean: tuple[float, ...],
    std: tuple[float, ...],
) -> torch.Tensor:
    """One augmented, normalised float view of a uint8 batch (N, 3, H, W) on its own device.

    All parameters are drawn first, on the host (``draw``), everything the device needs is sent in
    one non-blocking copy, then the view is built chunk by chunk (``_chunk``)."""
    x = _as_float(images)
    size = size or x.shape[-1]
    ship = Shipment()
    plans = _plan(x, cfg, gen, size, ship)
    consts = _constants(mean, std, x.dtype, ship)
    return _build(x, plans, ship.send(x.device), consts, cfg, size)


def two_views(
    images: torch.Tensor,
    cfg: AugmentConfig,
    gen: torch.Generator,
    *,
    mean: tuple[float, ...],
    std: tuple[float, ...],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent draws of the augmentation, as in SimCLR (the uint8 batch is converted to
    float once): the same draws, in the same order, as two ``augment`` calls, and one copy to the
    device for both."""
    x = _as_float(images)
    size = x.shape[-1]
    ship = Shipment()
    first, second = _plan(x, cfg, gen, size, ship), _plan(x, cfg, gen, size, ship)
    consts = _constants(mean, std, x.dtype, ship)
    got = ship.send(x.device)
    return _build(x, first, got, consts, cfg, size), _build(x, second, got, consts, cfg, size)
