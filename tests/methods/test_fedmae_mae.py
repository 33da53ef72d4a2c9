"""Masking and the masked-patch loss (docs/methods/fedmae.md §7 tests 1–2)."""

from __future__ import annotations

import pytest
import torch

from benchmark.building_blocks.backbones_vit import masking_from_ids, normalize_patches
from benchmark.contracts.registries import BACKBONES, load_builtins
from benchmark.core.config import from_mapping
from methods.fedmae import (
    keep_count,
    mae_loss,
    masked_patch_mse,
    random_patch_permutation,
)

load_builtins()


# paper, 32-px, tiny-16
@pytest.mark.parametrize("num_patches, masked", [(196, 147), (64, 48), (16, 12)])
def test_exactly_75_percent_masked_per_image(num_patches: int, masked: int) -> None:
    gen = torch.Generator().manual_seed(3)
    keep = keep_count(num_patches, 0.75)
    assert keep == num_patches - masked
    for _ in range(5):
        ids = random_patch_permutation(8, num_patches, gen)
        ids_keep, ids_restore, mask = masking_from_ids(ids, keep)
        assert torch.equal(mask.sum(1), torch.full((8,), float(masked)))
        for row in range(8):  # the kept patches are exactly the unmasked ones
            assert torch.equal(
                torch.sort(ids_keep[row]).values, torch.nonzero(mask[row] == 0).flatten()
            )
        assert torch.equal(
            torch.gather(ids, 1, ids_restore), torch.arange(num_patches).expand(8, -1)
        )


def test_masks_differ_across_steps_and_samples() -> None:
    gen = torch.Generator().manual_seed(0)
    a = masking_from_ids(random_patch_permutation(6, 64, gen), 16)[2]
    b = masking_from_ids(random_patch_permutation(6, 64, gen), 16)[2]
    assert not torch.equal(a, b)  # a fresh mask every step
    assert len({tuple(r.tolist()) for r in a}) == 6  # and per sample


def test_encoder_block_sees_only_visible_tokens() -> None:
    mae = from_mapping(BACKBONES.get("vit_micro"), {}).build_mae(1)
    seen = []
    mae.blocks[0].register_forward_hook(lambda m, i, o: seen.append(i[0].shape[1]))
    ids = random_patch_permutation(3, 16, torch.Generator().manual_seed(0))
    pred, mask = mae.forward_masked(torch.randn(3, 3, 16, 16), ids, 4)
    assert seen == [1 + 4] and pred.shape == (3, 16, 48) and mask.shape == (3, 16)


def test_loss_ignores_visible_patches_and_matches_hand_computation() -> None:
    gen = torch.Generator().manual_seed(1)
    pred = torch.randn(2, 16, 48, generator=gen)
    target = torch.randn(2, 16, 48, generator=gen)
    mask = masking_from_ids(random_patch_permutation(2, 16, gen), 4)[2]
    loss = mae_loss(pred, target, mask)
    changed = pred.clone()
    changed[mask == 0] += 7.0  # edit only the visible patches' predictions
    assert torch.equal(mae_loss(changed, target, mask), loss)
    hand = 0.0
    for i in range(2):
        for j in range(16):
            if mask[i, j] == 1:
                hand += float(((pred[i, j] - target[i, j]) ** 2).sum()) / 48
    assert loss.item() == pytest.approx(hand / 24, rel=1e-6)
    assert masked_patch_mse(target, target, mask).item() == 0.0


def test_norm_pix_targets_have_zero_mean_per_patch() -> None:
    t = torch.rand(2, 16, 48) * 3 + 1
    n = normalize_patches(t)
    assert torch.allclose(n.mean(-1), torch.zeros(2, 16), atol=1e-5)
    assert torch.allclose(n.std(-1), torch.ones(2, 16), atol=1e-3)
    mask = torch.ones(2, 16)
    assert mae_loss(n, t, mask, norm_pix_loss=True).item() == pytest.approx(0.0, abs=1e-10)
