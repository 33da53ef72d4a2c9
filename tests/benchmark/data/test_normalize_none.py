"""``normalize: none`` (EasyFL's FedU/FedEMA transforms: ToTensor only): the views and the encoder's
metadata use pixels in [0, 1] unchanged."""

from __future__ import annotations

import torch

from benchmark.api import AugmentConfig, two_views
from benchmark.data.datasets import load_dataset_splits

IDENTITY = AugmentConfig(
    crop_scale=(1.0, 1.0),
    crop_ratio=(1.0, 1.0),
    jitter=(0.0, 0.0, 0.0, 0.0),
    jitter_p=0.0,
    gray_p=0.0,
    flip_p=0.0,
    blur_p=0.0,
)


def test_normalize_none_leaves_pixels_in_unit_range() -> None:
    ds = load_dataset_splits("digits", {"normalize": "none"})
    assert (ds.mean, ds.std) == ((0.0,) * 3, (1.0,) * 3)
    assert load_dataset_splits("digits", {}).mean != ds.mean  # default: its own statistics
    images = ds.train.images[:4]
    v1, _ = two_views(images, IDENTITY, torch.Generator().manual_seed(0), mean=ds.mean, std=ds.std)
    torch.testing.assert_close(v1, images.float() / 255.0)
