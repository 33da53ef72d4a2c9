"""The crop-box draw picks each image's try and its fallback with NumPy (issue 53); before, with a few
dozen tiny tensor calls. The boxes, the generator's state afterwards and the ATen calls that round
(the kernel census that ``verify --kernels`` replays, in the order they are first made) must be
those of the tensor form."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from benchmark.commands.kernel_census import Census
from benchmark.data import augment as A
from benchmark.portable import math_ops as pmath


def _tensor_crop_boxes(n, height, width, cfg, gen):
    """The tensor form (29d59da), the reference."""
    area = height * width
    tries = 10
    scale = cfg.crop_scale[0] + (cfg.crop_scale[1] - cfg.crop_scale[0]) * A._rand(gen, n, tries)
    log_lo, log_hi = math.log(cfg.crop_ratio[0]), math.log(cfg.crop_ratio[1])
    ratio = pmath.exp(log_lo + (log_hi - log_lo) * A._rand(gen, n, tries))
    target = scale * area
    w = torch.round(pmath.sqrt(target * ratio))
    h = torch.round(pmath.sqrt(target / ratio))
    ok = (w > 0) & (h > 0) & (w <= width) & (h <= height)
    first = torch.where(ok.any(1), ok.float().argmax(1), torch.full((n,), -1))
    u_top, u_left = A._rand(gen, n), A._rand(gen, n)
    rows = torch.arange(n)
    hh = torch.where(first >= 0, h[rows, first.clamp(min=0)], torch.zeros(n))
    ww = torch.where(first >= 0, w[rows, first.clamp(min=0)], torch.zeros(n))
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
    top = torch.floor(u_top * (height - hh + 1)).clamp(max=height - hh)
    left = torch.floor(u_left * (width - ww + 1)).clamp(max=width - ww)
    top = torch.where(fallback, torch.full((n,), float((height - fh) // 2)), top)
    left = torch.where(fallback, torch.full((n,), float((width - fw) // 2)), left)
    return torch.stack([top, left, hh, ww], dim=1)


CONFIGS = [
    {},  # the SimCLR default
    {"crop_scale": (0.5, 1.0)},  # Orchestra's
    {"crop_scale": (0.2, 1.0)},  # the embedded default's
    # boxes that round to nothing, or never fit: every image or some fall back to the centre
    {"crop_scale": (0.001, 0.003), "crop_ratio": (0.1, 10.0)},
    {"crop_scale": (0.9, 1.0), "crop_ratio": (3.0, 4.0)},
    {"crop_scale": (0.9, 1.0), "crop_ratio": (0.2, 0.3)},
]
SIZES = [(16, 16), (32, 24), (12, 40)]


def _fallbacks(boxes: torch.Tensor, height: int, width: int, cfg) -> int:
    """Images whose box is the centred fallback whole image (clipped to the ratio range)."""
    fh, fw = A.fallback_size(height, width, cfg.crop_ratio)
    centre = torch.tensor([(height - fh) // 2, (width - fw) // 2, fh, fw], dtype=boxes.dtype)
    return int((boxes == centre).all(1).sum())


@pytest.mark.parametrize("settings", CONFIGS)
def test_the_boxes_are_the_tensor_form_bit_for_bit(settings) -> None:
    cfg = A.AugmentConfig(**settings)
    fell_back = 0
    for n, (height, width), seed in itertools.product((1, 3, 16, 64, 300), SIZES, (0, 1, 2)):
        gen, ref = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        got = A.crop_boxes(n, height, width, cfg, gen)
        want = _tensor_crop_boxes(n, height, width, cfg, ref)
        assert got.dtype == want.dtype == torch.float32 and got.shape == want.shape == (n, 4)
        assert torch.equal(got, want), (n, height, width, seed)
        assert torch.equal(gen.get_state(), ref.get_state())
        fell_back += _fallbacks(want, height, width, cfg)
    if settings.get("crop_ratio"):  # the fallback is exercised, not only the tries
        assert fell_back > 0


@pytest.mark.parametrize("settings", CONFIGS[:3])
def test_the_views_and_the_rounding_calls_are_the_tensor_forms(settings, monkeypatch) -> None:
    cfg = A.AugmentConfig(**settings, blur_p=0.5)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    for n in (2, 16, 64):
        images = torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8)

        def run(images=images):
            gen = torch.Generator().manual_seed(5)
            with Census() as census:
                views = [A.augment(images, cfg, gen, mean=mean, std=std)]
                views += A.two_views(images, cfg, gen, mean=mean, std=std)
            return views, gen.get_state(), list(census.calls)

        got = run()
        with monkeypatch.context() as m:
            m.setattr(A, "crop_boxes", _tensor_crop_boxes)
            want = run()
        assert all(torch.equal(a, b) for a, b in zip(got[0], want[0], strict=True)), n
        assert torch.equal(got[1], want[1])
        # the same calls that round, first made in the same order (each written down once)
        assert got[2] == want[2]
        assert any(k.startswith("aten.rsub") for k in got[2])
