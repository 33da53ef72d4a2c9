"""ViT backbones from timm blocks (docs/methods/fedmae.md §2.1, §2.7; tests 3, 9, 10)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmark.building_blocks.backbones import build_backbone
from benchmark.building_blocks.backbones_vit import ViTEncoder, patchify, sincos_2d, unpatchify
from benchmark.contracts.registries import BACKBONES, load_builtins
from benchmark.core.config import from_mapping

load_builtins()


def spec(name: str, **params):
    return from_mapping(BACKBONES.get(name), params)


def trainable(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


@pytest.mark.parametrize(
    "name, one_block, cascade",
    [
        ("vit_micro", 19_040, 69_856),  # tiny-16
        ("vit_tiny_p4", 590_160, 2_369_616),  # small-32
    ],
)
def test_parameter_counts_small_presets(name: str, one_block: int, cascade: int) -> None:
    s = spec(name, depth=5)
    assert trainable(s.build_mae(1)) == one_block
    assert trainable(s.build_mae(5)) == cascade


@pytest.mark.parametrize(
    "name, one_block, cascade, encoder_only",
    [
        # paper preset = Table 2 (11.62 M / 39.97 M)
        ("vit_base_p16", 11_622_400, 39_973_888, 36_032_256),
        ("vit_base_p4", 10_700_080, 39_051_568, None),  # cifar32-b
    ],
)
def test_parameter_counts_paper_presets(
    name: str, one_block: int, cascade: int, encoder_only
) -> None:
    s = spec(name)
    assert s.depth == 5
    assert trainable(s.build_mae(1)) == one_block
    assert trainable(s.build_mae(5)) == cascade
    if encoder_only is not None:
        enc, dim = build_backbone(name)
        assert trainable(enc) == encoder_only and dim == 768


def mae_formula(d: int, g: int) -> np.ndarray:
    """The MAE formula written out independently: rows (cls, then h-major grid); first half encodes
    w."""
    out = np.zeros((1 + g * g, d))
    half, quarter = d // 2, d // 4
    omega = 1.0 / 10000 ** (np.arange(quarter) / quarter)
    for h in range(g):
        for w in range(g):
            row = 1 + h * g + w
            out[row, :quarter] = np.sin(w * omega)
            out[row, quarter:half] = np.cos(w * omega)
            out[row, half : half + quarter] = np.sin(h * omega)
            out[row, half + quarter :] = np.cos(h * omega)
    return out


def test_position_embeddings_fixed_sincos_cls_row_zero() -> None:
    mae = spec("vit_micro").build_mae(1)
    for name, d in (("pos_embed", 32), ("decoder_pos_embed", 16)):
        pe = getattr(mae, name)
        assert not pe.requires_grad
        assert name not in mae.state_dict()  # never trained, never communicated
        assert torch.allclose(pe[0].double(), torch.from_numpy(mae_formula(d, 4)), atol=1e-6)
        assert torch.count_nonzero(pe[0, 0]) == 0
    assert torch.equal(sincos_2d(32, 4), mae.pos_embed)


@pytest.mark.parametrize("pool", ["mean", "cls"])
def test_encoder_forward_unmasked_shape(pool: str) -> None:
    torch.manual_seed(0)
    enc, dim = build_backbone("vit_micro", {"pool": pool, "depth": 3})
    assert isinstance(enc, ViTEncoder) and dim == 32
    seen = []
    for blk in enc.blocks:
        blk.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[1]))
    out = enc(torch.randn(5, 3, 16, 16))
    assert out.shape == (5, 32)
    assert seen == [1 + 16] * 3  # no masking at inference: all L tokens pass every block


def test_blocks_are_wired_in_order() -> None:
    torch.manual_seed(0)
    enc, _ = build_backbone("vit_micro", {"depth": 2})
    x = torch.randn(4, 3, 16, 16)
    before = enc(x)
    with torch.no_grad():  # replace block 1's weights by other random values
        for t in enc.blocks[0].parameters():
            t.add_(torch.randn_like(t) * 0.1)
    assert not torch.allclose(enc(x), before)
    swapped, _ = build_backbone("vit_micro", {"depth": 2})
    swapped.load_state_dict(enc.state_dict())
    swapped.blocks = torch.nn.ModuleList([enc.blocks[1], enc.blocks[0]])
    assert not torch.allclose(swapped(x), enc(x))


def test_patchify_roundtrip_and_layout() -> None:
    x = torch.randn(2, 3, 16, 16)
    p = patchify(x, 4)
    assert p.shape == (2, 16, 48)
    assert torch.equal(unpatchify(p, 4), x)
    assert torch.equal(p[0, 1, :3], x[0, :, 0, 4])  # patch (0, 1), pixel (0, 0): channel fastest


def test_wrong_sizes_are_rejected() -> None:
    with pytest.raises(ValueError):
        spec("vit_micro", img_size=18)
    with pytest.raises(ValueError):
        spec("vit_micro", embed_dim=30)
    assert BACKBONES.canonical("mae_one_block") == "vit_base_p4"
    assert math.isclose(spec("vit_micro").mlp_ratio, 4.0)
