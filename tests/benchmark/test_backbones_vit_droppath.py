"""Stochastic depth on the ViT backbones (used by the ``finetune/fedmae`` card): off by default,
linear per block."""

from __future__ import annotations

import pytest
import torch
from timm.layers import DropPath

from benchmark.building_blocks.backbones_vit import ViTEncoder, drop_path_rates
from benchmark.contracts.types import arch_fingerprint
from benchmark.core.seeding import Stream, scoped_torch_seed

KW = dict(img_size=16, patch_size=4, embed_dim=32, depth=5, num_heads=2)


def _enc(**kw) -> ViTEncoder:
    with scoped_torch_seed(0, Stream.INIT):
        return ViTEncoder(**KW, **kw)


def test_default_has_no_drop_path_and_unchanged_architecture():
    a, b = _enc(), _enc(drop_path_rate=0.0)
    assert all(isinstance(blk.drop_path1, torch.nn.Identity) for blk in a.blocks)
    assert arch_fingerprint(a) == arch_fingerprint(b)
    x = torch.randn(3, 3, 16, 16)
    a.train(), b.train()
    assert torch.equal(a(x), b(x))  # training mode is deterministic without drop path


def test_rates_rise_linearly_and_set_drop_path_is_reversible():
    assert drop_path_rates(0.1, 5) == pytest.approx([0.0, 0.025, 0.05, 0.075, 0.1])
    built = _enc(drop_path_rate=0.1)
    got = [getattr(blk.drop_path1, "drop_prob", 0.0) for blk in built.blocks]
    assert got == pytest.approx(drop_path_rates(0.1, 5))
    enc = _enc()
    ref = {k: v.clone() for k, v in enc.state_dict().items()}
    x = torch.randn(4, 3, 16, 16)
    enc.eval()
    y0 = enc(x)
    enc.set_drop_path(0.1)
    assert isinstance(enc.blocks[4].drop_path2, DropPath) and isinstance(
        enc.blocks[0].drop_path1, torch.nn.Identity
    )
    assert torch.equal(enc(x), y0)  # eval mode: drop path is the identity
    enc.train()
    torch.manual_seed(0)
    y1 = enc(x)
    torch.manual_seed(1)
    assert not torch.equal(enc(x), y1)  # training mode: stochastic
    enc.set_drop_path(0.0)
    assert all(isinstance(blk.drop_path2, torch.nn.Identity) for blk in enc.blocks)
    assert all(torch.equal(ref[k], v) for k, v in enc.state_dict().items())
    with pytest.raises(ValueError):
        enc.set_drop_path(1.0)
