"""The jitter plan ships all its steps' values in three parcels a view (issue 53); before, each step
had its own two parcels and ``nonzero``. The views, the generator's state afterwards and the ATen
calls (the kernel census that ``verify --kernels`` replays) must be those of the per-step form."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from benchmark.commands.kernel_census import Census
from benchmark.core.host_to_device import Parcel
from benchmark.data import augment as A
from benchmark.data.datasets import load_dataset_splits


@dataclass(frozen=True)
class _Step:
    op: int
    rows: A._Rows
    values: Parcel


def _per_step_plan(factors, order, cfg, dtype, ship):
    f = factors.to(dtype)
    steps = []
    for slot in range(4):
        for op, strength in enumerate(cfg.jitter):
            if strength <= 0:
                continue
            rows, host = A._select(order[:, slot] == op, ship)
            if rows.count == 0:
                continue
            value = f[host, op]
            value = A.hue_offsets(value, dtype) if op == 3 else value
            steps.append(_Step(op, rows, ship.add(value, dtype)))
    return tuple(steps)


def _per_step_jitter_(y, steps, got, luma):
    for s in steps:
        value = got[s.values]
        A._on_rows(y, s.rows, got, lambda v, s=s, value=value: A._JITTER_OPS[s.op](v, value, luma))
    return y


CONFIGS = [
    # Orchestra's A on digits, FLESD's strong jitter, the SimCLR default, ops left out
    {"crop_scale": (0.5, 1.0), "interpolation": "bicubic", "flip_p": 0.0, "blur_p": 0.5},
    {"crop_scale": (0.2, 1.0), "flip_p": 0.0, "jitter": (0.8, 0.8, 0.8, 0.2)},
    {},
    {"jitter": (0.4, 0.0, 0.4, 0.1), "jitter_p": 1.0, "gray_p": 0.0},
    {"jitter": (0.0, 0.0, 0.0, 0.3), "jitter_p": 0.5},
    {"jitter": (0.4, 0.4, 0.4, 0.0), "jitter_p": 1.0},
]


def _run(cfg: A.AugmentConfig, images: torch.Tensor, mean, std):
    gen = torch.Generator().manual_seed(11)
    with Census() as census:
        views = [A.augment(images, cfg, gen, mean=mean, std=std)]
        views += A.two_views(images, cfg, gen, mean=mean, std=std)
    return views, gen.get_state(), set(census.calls)


@pytest.mark.parametrize("settings", CONFIGS)
def test_the_jitter_plan_is_the_per_step_form(settings, monkeypatch) -> None:
    ds = load_dataset_splits("digits", {"size": 16})
    cfg = A.AugmentConfig(**settings)
    for n in (1, 16, 64):
        images = ds.train.images[:n]
        got = _run(cfg, images, ds.mean, ds.std)
        with monkeypatch.context() as m:
            m.setattr(A, "_plan_jitter", _per_step_plan)
            m.setattr(A, "color_jitter_", _per_step_jitter_)
            want = _run(cfg, images, ds.mean, ds.std)
        assert all(torch.equal(a, b) for a, b in zip(got[0], want[0], strict=True)), n
        assert torch.equal(got[1], want[1])
        assert got[2] == want[2], sorted(got[2] ^ want[2])[:3]
