"""``recon/mae@v1`` (docs/protocols/evaluation.md §7 item 8) and the FedMAE export it reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from benchmark.api import Encoder, TaskContext, TaskNotApplicable
from benchmark.building_blocks.backbones_vit import masking_from_ids, patchify
from benchmark.contracts.data_types import DatasetSplit, DatasetSplits
from benchmark.contracts.registries import load_builtins
from tasks.reconstruction import (
    Reconstruction,
    ReconstructionConfig,
    per_image_mse,
    psnr,
    recon_masks,
)

load_builtins()
MEAN, STD = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)


class Oracle(nn.Module):
    """Predicts from the (normalised) input itself: ``mode="copy"`` exactly, ``"mean"`` the
    masked-pixel mean."""

    patch_size, num_patches, norm_pix_loss = 4, 16, False

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode, self.seen = mode, []

    def forward_masked(self, x, ids, len_keep):
        self.seen.append(ids.clone())
        mask = masking_from_ids(ids, len_keep)[2]
        m, s = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
        if self.mode == "copy":
            return patchify(x, 4), mask
        pix = patchify(x * s + m, 4)  # [0, 1] space
        mu = (pix.mean(-1) * mask).sum(1) / mask.sum(1)  # per-image mean over masked pixels
        const = (mu.view(-1, 1, 1, 1) - m) / s  # the same constant, in the normalised space
        return patchify(const.expand_as(x).contiguous(), 4), mask


def context(n: int = 10) -> TaskContext:
    gen = torch.Generator().manual_seed(0)
    imgs = torch.randint(0, 256, (n, 3, 16, 16), generator=gen, dtype=torch.uint8)
    split = DatasetSplit(imgs, np.zeros(n, dtype=np.int64), 2)
    return TaskContext(
        dataset=DatasetSplits("toy", split, split, "r", MEAN, STD),
        data_root=Path("."),
        out_dir=Path("."),
        device=torch.device("cpu"),
        seed=0,
        feature_cache={},
    )


def encoder(model: nn.Module | None) -> Encoder:
    return Encoder(
        module=nn.Identity(),
        feat_dim=1,
        backbone="toy",
        fingerprint="f",
        input_size=16,
        mean=MEAN,
        std=STD,
        extras={"mae": model} if model is not None else {},
    )


def test_identical_masks_for_models_with_the_same_grid() -> None:
    a, b = Oracle("copy"), Oracle("mean")
    task = Reconstruction(ReconstructionConfig(batch_size=4))
    task.run(encoder(a), context())
    task.run(encoder(b), context())
    assert all(torch.equal(x, y) for x, y in zip(a.seen, b.seen)) and len(a.seen) == 3
    assert torch.equal(torch.cat(a.seen), recon_masks(10, 16, 0))
    assert not torch.equal(recon_masks(10, 16, 1), recon_masks(10, 16, 0))


def test_perfect_reconstruction_scores_zero_and_100_db() -> None:
    s = Reconstruction(ReconstructionConfig()).run(encoder(Oracle("copy")), context())
    assert s.values["mse"] == pytest.approx(0.0, abs=1e-10) and s.values["psnr"] == pytest.approx(
        100.0
    )
    assert s.card.name == "recon/mae@v1" and s.main_metric == "mse" and not s.higher_is_better
    assert s.extra["num_images"] == 10 and s.extra["len_keep"] == 4


def test_predicting_the_mean_gives_the_masked_pixel_variance() -> None:
    ctx = context()
    s = Reconstruction(ReconstructionConfig()).run(encoder(Oracle("mean")), ctx)
    imgs = ctx.dataset.test.images.float() / 255
    ids = recon_masks(10, 16, 0)
    mask = masking_from_ids(ids, 4)[2].bool()
    pix = patchify(imgs, 4)
    var = [float(pix[i][mask[i]].flatten().double().var(unbiased=False)) for i in range(10)]
    assert s.values["mse"] == pytest.approx(float(np.mean(var)), rel=1e-5)


def test_pure_metrics() -> None:
    assert float(psnr(torch.tensor([0.01]))) == pytest.approx(20.0)
    pred, target = torch.zeros(1, 2, 3), torch.ones(1, 2, 3)
    target[0, 1] = 0
    assert float(per_image_mse(pred, target, torch.tensor([[1.0, 0.0]]))) == 1.0


def test_not_applicable_without_a_decoder_or_in_the_wrong_space() -> None:
    with pytest.raises(TaskNotApplicable):
        Reconstruction(ReconstructionConfig()).run(encoder(None), context())
    with pytest.raises(TaskNotApplicable):
        Reconstruction(ReconstructionConfig(space="normpix")).run(
            encoder(Oracle("copy")), context()
        )


def test_fedmae_cell_scores_reconstruction(tmp_path: Path) -> None:
    from benchmark.engine.runner import run_cell
    from tests.helpers import smoke_cell

    cell = smoke_cell("fedmae", tasks=[{"name": "reconstruction", "max_images": 64}, "knn"])
    record = run_cell(cell, tmp_path, device="cpu")
    assert record is not None and record.status == "ok"
    recon = next(s for s in record.scores if s.task == "reconstruction")
    assert 0 < recon.values["mse"] < 1 and recon.values["psnr"] > 0
    nop = run_cell(
        smoke_cell("no_pretrain", backbone={"name": "vit_micro"}, tasks=["knn", "reconstruction"]),
        tmp_path,
        device="cpu",
    )
    assert nop is not None and [s.task for s in nop.scores] == ["knn"]  # a plain ViT has no decoder
    assert nop.backbone_fingerprint == record.backbone_fingerprint  # same shape as FedMAE's cascade
