"""Properties of the batched SSL augmentation (benchmark/data/augment.py), including its fast paths
(issue 10, P2)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from benchmark.data.augment import (
    AugmentConfig,
    _hsv_to_rgb,
    _rgb_to_hsv,
    _shift_hue,
    augment,
    crop_boxes,
    resized_crop,
    two_views,
)

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


def _images(n: int = 64, size: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randint(
        0, 256, (n, 3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


def test_output_shape_dtype_and_finite():
    x = _images()
    for cfg in (AugmentConfig(), AugmentConfig(interpolation="bicubic", blur_p=0.5)):
        v1, v2 = two_views(x, cfg, torch.Generator().manual_seed(1), mean=MEAN, std=STD)
        for v in (v1, v2):
            assert (
                v.shape == (64, 3, 16, 16) and v.dtype == torch.float32 and torch.isfinite(v).all()
            )
        assert not torch.equal(v1, v2)  # two independent draws
        out = augment(x, cfg, torch.Generator().manual_seed(1), size=8, mean=MEAN, std=STD)
        assert out.shape == (64, 3, 8, 8)


def test_deterministic_given_generator_and_generator_advances():
    x = _images()
    a = two_views(x, AugmentConfig(), torch.Generator().manual_seed(7), mean=MEAN, std=STD)
    b = two_views(x, AugmentConfig(), torch.Generator().manual_seed(7), mean=MEAN, std=STD)
    c = two_views(x, AugmentConfig(), torch.Generator().manual_seed(8), mean=MEAN, std=STD)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a[0], c[0])


def test_two_views_equal_two_augment_calls_on_the_same_stream():
    """Converting the uint8 batch once in two_views does not change what each augment call draws or
    returns."""
    x, cfg = _images(), AugmentConfig()
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    v1, v2 = two_views(x, cfg, g1, mean=MEAN, std=STD)
    w1, w2 = augment(x, cfg, g2, mean=MEAN, std=STD), augment(x, cfg, g2, mean=MEAN, std=STD)
    assert torch.equal(v1, w1) and torch.equal(v2, w2)
    assert torch.equal(g1.get_state(), g2.get_state())


def test_crop_boxes_inside_the_image_and_scale_in_range():
    cfg = AugmentConfig(crop_scale=(0.2, 1.0))
    for h, w in ((32, 32), (16, 24), (7, 5)):
        boxes = crop_boxes(4000, h, w, cfg, torch.Generator().manual_seed(0))
        top, left, bh, bw = boxes.unbind(1)
        assert (top >= 0).all() and (left >= 0).all() and (bh >= 1).all() and (bw >= 1).all()
        assert (top + bh <= h).all() and (left + bw <= w).all()
        assert (top == top.round()).all() and (bh == bh.round()).all()
    boxes = crop_boxes(4000, 32, 32, cfg, torch.Generator().manual_seed(1))
    area = boxes[:, 2] * boxes[:, 3] / (32 * 32)
    # rounding can shave a little off the 0.2 lower bound
    assert area.min() >= 0.15 and area.max() <= 1.0


def test_flip_probability_matches_p():
    """Crop to the whole image with p(flip) = 0.3: a flipped output is the mirror image of its
    input."""
    n = 4000
    x = torch.arange(8.0).view(1, 1, 1, 8).expand(n, 3, 8, 8).contiguous() / 8
    cfg = AugmentConfig(
        crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_p=0.3, jitter_p=0.0, gray_p=0.0
    )
    out = augment(x, cfg, torch.Generator().manual_seed(0), mean=(0.0,) * 3, std=(1.0,) * 3)
    flipped = torch.isclose(out, x.flip(-1), atol=1e-5).flatten(1).all(1)
    same = torch.isclose(out, x, atol=1e-5).flatten(1).all(1)
    assert bool((flipped ^ same).all())
    rate = flipped.float().mean().item()
    assert abs(rate - 0.3) < 4 * (0.3 * 0.7 / n) ** 0.5


def test_broadcast_grid_equals_affine_grid():
    x = torch.rand(32, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    boxes = crop_boxes(32, 16, 16, AugmentConfig(), torch.Generator().manual_seed(1))
    flip = torch.rand(32, generator=torch.Generator().manual_seed(2)) < 0.5
    top, left, h, w = boxes.unbind(1)
    theta = torch.zeros(32, 2, 3)
    theta[:, 0, 0] = w / 16 * torch.where(flip, -1.0, 1.0)
    theta[:, 0, 2] = (left + w / 2) / 16 * 2 - 1
    theta[:, 1, 1] = h / 16
    theta[:, 1, 2] = (top + h / 2) / 16 * 2 - 1
    ref = F.grid_sample(
        x,
        F.affine_grid(theta, (32, 3, 12, 12), align_corners=False),
        mode="bilinear",
        padding_mode="border",
        align_corners=False,
    )
    torch.testing.assert_close(resized_crop(x, boxes, flip, 12), ref, atol=1e-5, rtol=0)


def test_shift_hue_equals_hsv_round_trip():
    x = torch.rand(64, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    x[:4] = x[:4, :1]  # grey images (delta = 0) keep their value
    shift = (torch.rand(64, generator=torch.Generator().manual_seed(1)) - 0.5) * 0.4
    hsv = _rgb_to_hsv(x)
    ref = _hsv_to_rgb(
        torch.stack([(hsv[:, 0] + shift.view(64, 1, 1)) % 1.0, hsv[:, 1], hsv[:, 2]], 1)
    )
    torch.testing.assert_close(_shift_hue(x, shift.view(64, 1, 1)), ref, atol=2e-5, rtol=0)
    torch.testing.assert_close(_shift_hue(x, torch.zeros(64, 1, 1)), x, atol=2e-5, rtol=0)


def _torchvision_view(x: torch.Tensor, cfg: AugmentConfig, gen: torch.Generator) -> torch.Tensor:
    """One view built image by image with torchvision's functional ops, from parameters drawn in the
    documented order (crop boxes, flip, jitter apply/brightness/contrast/saturation/hue/order,
    grayscale, blur apply/sigma)."""
    import torchvision.transforms.functional as TF

    n, _, h, w = x.shape
    boxes = crop_boxes(n, h, w, cfg, gen)
    flip = torch.rand(n, generator=gen) < cfg.flip_p
    jit = torch.rand(n, generator=gen) < cfg.jitter_p
    fac = [torch.rand(n, generator=gen) for _ in range(4)]
    bri, con, sat, hue = cfg.jitter
    fb, fc, fs = (1 - v + 2 * v * f for v, f in zip((bri, con, sat), fac))
    fh = -hue + 2 * hue * fac[3]
    # one permutation per image
    order = torch.argsort(torch.rand(n * 4, generator=gen).view(n, 4), dim=1).tolist()
    gray = torch.rand(n, generator=gen) < cfg.gray_p
    blur = torch.rand(n, generator=gen) < cfg.blur_p
    sigma = cfg.blur_sigma[0] + (cfg.blur_sigma[1] - cfg.blur_sigma[0]) * torch.rand(
        n, generator=gen
    )
    # the crop is checked above against affine_grid
    crops = resized_crop(x, boxes, flip, w, cfg.interpolation)
    out = []
    for i in range(n):
        img = crops[i]
        if jit[i]:
            for op in order[i]:
                if op == 0:
                    img = TF.adjust_brightness(img, float(fb[i]))
                elif op == 1:
                    img = TF.adjust_contrast(img, float(fc[i]))
                elif op == 2:
                    img = TF.adjust_saturation(img, float(fs[i]))
                else:
                    img = TF.adjust_hue(img, float(fh[i]))
        if gray[i]:
            img = TF.rgb_to_grayscale(img, 3)
        if blur[i]:
            img = TF.gaussian_blur(img, [cfg.blur_kernel] * 2, [float(sigma[i])] * 2)
        out.append(TF.normalize(img, MEAN, STD))
    return torch.stack(out), jit | gray | blur


def test_view_equals_torchvision_functional_ops_image_by_image(monkeypatch):
    """The batched, in-place, selected-images-only view equals torchvision's ops applied per image
    to the same draws, to float rounding. torchvision's tensor grayscale weighs red 0.2989 where PIL
    (and we) use 0.299, so the reference's grayscale (also used by its contrast and saturation) is
    given PIL's weights. Images no op selected are bitwise the normalised crop."""
    from torchvision.transforms import _functional_tensor as tvf

    def luma_299(img: torch.Tensor, num_output_channels: int = 1) -> torch.Tensor:
        r, g, b = img.unbind(-3)
        return (
            (0.299 * r + 0.587 * g + 0.114 * b)
            .unsqueeze(-3)
            .expand(num_output_channels, *img.shape[-2:])
        )

    monkeypatch.setattr(tvf, "rgb_to_grayscale", luma_299)
    x = _images(96, 16)
    for cfg in (AugmentConfig(), AugmentConfig(blur_p=0.5, jitter_p=0.6, gray_p=0.4)):
        got = augment(x, cfg, torch.Generator().manual_seed(11), mean=MEAN, std=STD)
        ref, touched = _torchvision_view(x.float() / 255, cfg, torch.Generator().manual_seed(11))
        # 1e-5 in [0, 1] units, divided by std 0.25
        torch.testing.assert_close(got, ref, atol=5e-5, rtol=0)
        assert torch.equal(got[~touched], ref[~touched])
        assert 0 < int(touched.sum()) < 96


def test_chunked_view_equals_one_chunk(monkeypatch):
    """Building the view in small CPU chunks (benchmark.data.augment._chunk) does not change a
    single bit."""
    import benchmark.data.augment as aug

    x = _images(50, 16)
    for cfg in (AugmentConfig(), AugmentConfig(blur_p=0.5, interpolation="bicubic")):
        whole = two_views(x, cfg, torch.Generator().manual_seed(4), mean=MEAN, std=STD)
        # 7 images per chunk, a ragged last one
        monkeypatch.setattr(aug, "_CHUNK_BYTES", 7 * 3 * 16 * 16 * 4)
        chunked = two_views(x, cfg, torch.Generator().manual_seed(4), mean=MEAN, std=STD)
        monkeypatch.undo()
        assert all(torch.equal(a, b) for a, b in zip(whole, chunked))


def test_shift_hue_equals_torchvision_adjust_hue():
    import torchvision.transforms.functional as TF

    x = torch.rand(32, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    x[:3] = x[:3, :1]  # grey
    x[3:6, 1] = x[3:6, 0]  # ties between the red and green maxima
    x[6:9, 2] = x[6:9, 1]
    shift = torch.linspace(-0.5, 0.5, 32)
    ref = torch.stack([TF.adjust_hue(x[i], float(shift[i])) for i in range(32)])
    torch.testing.assert_close(_shift_hue(x, shift), ref, atol=1e-5, rtol=0)


def test_jitter_order_is_a_uniform_permutation_per_image():
    """As torchvision's ColorJitter (a fresh randperm(4) per image): every image has its own order
    of the four ops and all 24 orders are equally likely (chi-square, 23 degrees of freedom, p =
    0.001 bound 49.7)."""
    from benchmark.data.augment import draw

    n = 24_000
    d = draw(n, 8, 8, AugmentConfig(), torch.Generator().manual_seed(3))
    assert d.order.shape == (n, 4) and torch.equal(
        d.order.sort(dim=1).values, torch.arange(4).expand(n, 4)
    )
    codes = (d.order * torch.tensor([64, 16, 4, 1])).sum(1)
    counts = torch.unique(codes, return_counts=True)[1].double()
    assert counts.numel() == 24
    expected = n / 24
    assert float(((counts - expected) ** 2 / expected).sum()) < 49.7
