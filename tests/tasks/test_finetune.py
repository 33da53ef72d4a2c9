"""``finetune/fedmae`` (docs/protocols/evaluation.md §3.5, docs/methods/fedmae.md §3): layer decay,
weight-decay exclusions, schedule, mixup, determinism without global-RNG side effects, the encoder
untouched, the test split read once, ResNets, a real cell."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.api import (
    TASKS,
    DatasetSplit,
    DatasetSplits,
    Encoder,
    Stream,
    TaskContext,
    TaskNotApplicable,
    arch_fingerprint,
    build_backbone,
    from_mapping,
    scoped_torch_seed,
)
from benchmark.contracts.registries import load_builtins
from benchmark.contracts.task import task_datasets
from benchmark.core.config import ConfigError, config_dict
from benchmark.data.datasets import load_dataset_splits
from tasks.finetuning.classifier import Classifier
from tasks.finetuning.finetune import (
    FinetuneConfig,
    _posterize_compat,
    layer_decay_param_groups,
    lr_at,
    make_mixup,
    scoped_global_rngs,
    trunk_blocks,
)

load_builtins()
DEPTH = 5


def _encoder(name: str = "vit_micro", seed: int = 0, **params) -> Encoder:
    params = params or ({"depth": DEPTH} if name.startswith("vit") else {"width": 4})
    with scoped_torch_seed(seed, Stream.INIT):
        module, dim = build_backbone(name, params)
    return Encoder(
        module=module,
        feat_dim=dim,
        backbone=name,
        fingerprint=arch_fingerprint(module),
        input_size=16,
        mean=(0.3,) * 3,
        std=(0.3,) * 3,
    )


def _small_digits(n_train: int = 96, n_test: int = 40) -> DatasetSplits:
    ds = load_dataset_splits("digits")
    return dataclasses.replace(
        ds, train=ds.train.subset(np.arange(n_train)), test=ds.test.subset(np.arange(n_test))
    )


def _ctx(tmp_path: Path, ds: DatasetSplits | None = None) -> TaskContext:
    return TaskContext(
        dataset=ds or _small_digits(),
        data_root=tmp_path,
        out_dir=tmp_path,
        device=torch.device("cpu"),
        seed=0,
        feature_cache={},
    )


def _task(**params):
    cls = TASKS.get("finetune")
    return cls(
        from_mapping(cls.Config, {"epochs": 2, "warmup_epochs": 1, "batch_size": 32, **params})
    )


def _classifier(name: str = "vit_micro") -> Classifier:
    enc = _encoder(name)
    return Classifier(enc.module, enc.feat_dim, 10, 2e-5)


# ---- layer-wise lr decay and weight decay --------------------------------------------------------
def test_layer_decay_scales_per_block_head_gets_base_lr():
    model = _classifier()
    groups = layer_decay_param_groups(
        model, [f"backbone.blocks.{i}" for i in range(DEPTH)], weight_decay=0.05, layer_decay=0.75
    )
    scale = {n: g["lr_scale"] for g in groups for n in g["names"]}
    assert set(scale) == {n for n, _ in model.named_parameters()}
    for i in range(DEPTH):  # block i is layer i + 1: 0.75^(depth + 1 - (i + 1))
        for n in (k for k in scale if k.startswith(f"backbone.blocks.{i}.")):
            assert scale[n] == pytest.approx(0.75 ** (DEPTH + 1 - (i + 1)))
    for n in (
        "backbone.patch_embed.proj.weight",
        "backbone.patch_embed.proj.bias",
        "backbone.cls_token",
    ):
        assert scale[n] == pytest.approx(0.75 ** (DEPTH + 1))  # embeddings: layer 0
    for n in ("head.weight", "head.bias", "backbone.norm.weight", "backbone.norm.bias"):
        assert scale[n] == 1.0  # the head (and the final norm, MAE) train at the base lr
    # the optimizer uses lr · lr_scale per group
    opt = torch.optim.AdamW(groups, lr=1.0)
    assert {g["layer"] for g in opt.param_groups} == set(range(DEPTH + 2))


def test_no_weight_decay_on_norms_biases_cls():
    model = _classifier()
    groups = layer_decay_param_groups(
        model, [f"backbone.blocks.{i}" for i in range(DEPTH)], weight_decay=0.05, layer_decay=0.75
    )
    wd = {n: g["weight_decay"] for g in groups for n in g["names"]}
    for n in wd:
        if n.endswith(".bias") or ".norm" in n or n.endswith("cls_token"):
            assert wd[n] == 0.0, n
        elif n.endswith(".weight") and dict(model.named_parameters())[n].ndim >= 2:
            assert wd[n] == 0.05, n
    assert wd["backbone.blocks.0.attn.qkv.weight"] == 0.05 and wd["head.weight"] == 0.05
    assert "backbone.pos_embed" not in wd  # fixed sin-cos buffer: never trained, never decayed


def test_layer_groups_match_timm_on_a_timm_vit():
    """Oracle: timm's ``param_groups_layer_decay`` (BEiT/MAE rule) on a timm ViT with a learnable
    pos_embed."""
    from timm.models.vision_transformer import VisionTransformer
    from timm.optim import param_groups_layer_decay

    with scoped_torch_seed(0, Stream.INIT):
        vit = VisionTransformer(
            img_size=16,
            patch_size=4,
            embed_dim=32,
            depth=4,
            num_heads=2,
            num_classes=10,
            global_pool="token",
        )
    ours = layer_decay_param_groups(vit, trunk_blocks(vit), weight_decay=0.05, layer_decay=0.75)
    ref = param_groups_layer_decay(
        vit, weight_decay=0.05, layer_decay=0.75, no_weight_decay_list=vit.no_weight_decay()
    )
    names = {id(p): n for n, p in vit.named_parameters()}
    want = {names[id(p)]: (g["lr_scale"], g["weight_decay"]) for g in ref for p in g["params"]}
    got = {n: (g["lr_scale"], g["weight_decay"]) for g in ours for n in g["names"]}
    assert got.keys() == want.keys()
    for n in got:
        # timm gives the final norm its own layer below the head (scale 0.75); MAE's
        if n.startswith("norm."):
            # lr_decay.py puts it (fc_norm) with the head at scale 1: we follow MAE
            assert got[n] == (1.0, 0.0)
            assert want[n] == pytest.approx((0.75, 0.0))
        else:
            assert got[n] == pytest.approx(want[n]), n
    assert got["pos_embed"][1] == 0.0 and got["cls_token"][1] == 0.0


def test_resnet_layer_groups_and_unsupported_backbone():
    model = _classifier("resnet_micro")
    blocks = trunk_blocks(model.backbone)
    assert blocks == ["layer1.0", "layer2.0", "layer3.0", "layer4.0"]
    groups = layer_decay_param_groups(
        model, [f"backbone.{b}" for b in blocks], weight_decay=0.05, layer_decay=0.75
    )
    scale = {n: g["lr_scale"] for g in groups for n in g["names"]}
    assert (
        scale["backbone.conv1.weight"] == pytest.approx(0.75**5)
        and scale["backbone.layer3.0.conv1.weight"] == pytest.approx(0.75**2)
        and scale["head.weight"] == 1.0
    )
    with pytest.raises(TaskNotApplicable, match="layer-wise lr decay"):
        trunk_blocks(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(768, 8)))


def test_lr_schedule_warmup_then_cosine():
    kw = dict(lr=2.5e-4, min_lr=1e-6, warmup_epochs=5, epochs=100)
    assert lr_at(0.0, **kw) == 0.0
    assert lr_at(2.5, **kw) == pytest.approx(1.25e-4)
    assert lr_at(5.0, **kw) == pytest.approx(2.5e-4)
    assert lr_at(52.5, **kw) == pytest.approx(1e-6 + (2.5e-4 - 1e-6) * 0.5)
    assert lr_at(100.0, **kw) == pytest.approx(1e-6)
    # continuous at the warmup end
    assert lr_at(4.999, **kw) == pytest.approx(lr_at(5.0, **kw), rel=1e-3)
    assert lr_at(1.0, lr=1.0, min_lr=0.0, warmup_epochs=0, epochs=2) == pytest.approx(0.5)
    assert FinetuneConfig().lr == pytest.approx(1e-3 * 64 / 256)


# ---- mixup, RNG scoping, augmentation compatibility ----------------------------------------------
def test_mixup_targets_sum_to_one_and_are_smoothed():
    cfg = FinetuneConfig()
    mix = make_mixup(cfg, 10)
    y = torch.arange(8) % 10
    for k in range(6):
        with scoped_global_rngs(k, 99):
            x, soft = mix(torch.randn(8, 3, 16, 16), y)
        assert soft.shape == (8, 10) and x.shape == (8, 3, 16, 16)
        assert torch.allclose(soft.sum(1), torch.ones(8), atol=1e-6)
        # label smoothing puts at least ε/C on every class
        assert float(soft.min()) >= 0.1 / 10 - 1e-7
    assert make_mixup(FinetuneConfig(mixup=0.0, cutmix=0.0), 10) is None


def test_scoped_global_rngs_restores_caller_state_and_repeats():
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone())
    draws = []
    for _ in range(2):
        with scoped_global_rngs(0, 1):
            draws.append((random.random(), float(np.random.rand()), float(torch.rand(1))))
    assert draws[0] == draws[1]
    assert random.getstate() == states[0] and np.array_equal(np.random.get_state()[1], states[1])
    assert torch.equal(torch.get_rng_state(), states[2])


def test_posterize_zero_bits_is_black():
    from PIL import Image

    img = Image.fromarray(np.full((4, 4, 3), 200, dtype=np.uint8))
    assert np.asarray(_posterize_compat(img, 0)).max() == 0
    assert np.asarray(_posterize_compat(img, 1)).max() == 128
    assert _posterize_compat(img, 8) is img


# ---- the task ------------------------------------------------------------------------------------
def test_card_settings_and_strict_frozen_config():
    card = _task().card()
    assert card.name == "finetune/fedmae" and card.task == "finetune" and not card.selects_on_test
    assert "project completion, not from the paper" in card.settings["source"]
    assert "fine-tuned" in card.summary and card.settings["fine_tuned"] is True
    default = TASKS.get("finetune")(FinetuneConfig()).card().settings
    for key, value in {
        "epochs": 100,
        "batch_size": 64,
        "blr": 1e-3,
        "lr": 2.5e-4,
        "layer_decay": 0.75,
        "weight_decay": 0.05,
        "drop_path": 0.1,
        "warmup_epochs": 5.0,
        "label_smoothing": 0.1,
        "mixup": 0.8,
        "cutmix": 1.0,
        "label_fraction": 1.0,
        "selection": "final",
    }.items():
        assert default[key] == value, key
    assert default["augmentation"]["rand_augment"] == "rand-m9-mstd0.5-inc1"
    assert default["augmentation"]["random_erasing"]["p"] == 0.25
    assert _task(label_fraction=0.1).card().card_id != card.card_id
    with pytest.raises((ConfigError, TypeError)):
        from_mapping(FinetuneConfig, {"epochs": 1, "no_such_field": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        FinetuneConfig().epochs = 3  # type: ignore[misc]
    with pytest.raises(ValueError):
        FinetuneConfig(batch_size=33)  # mixup needs even batches


def test_runs_leaves_encoder_untouched_and_reads_test_once(tmp_path):
    ds = _small_digits()
    reads = {"images": 0, "labels": 0}

    class CountingSplit(DatasetSplit):
        def __getattribute__(self, name):
            if name in reads:
                reads[name] += 1
            return object.__getattribute__(self, name)

    test = CountingSplit(ds.test.images, ds.test.labels, ds.test.num_classes)
    ds = dataclasses.replace(ds, test=test)
    enc = _encoder()
    before = {k: v.clone() for k, v in enc.module.state_dict().items()}
    modules_before = [type(m) for m in enc.module.modules()]
    training = enc.module.training
    s = _task().run(enc, _ctx(tmp_path, ds))
    # evaluate() alone touches the test split, once
    assert reads == {"images": 1, "labels": 1}, reads
    after = enc.module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # no DropPath leaked into the original
    assert [type(m) for m in enc.module.modules()] == modules_before
    assert enc.module.training == training
    assert s.extra["drop_path_applied"] is True and s.extra["test_samples"] == len(ds.test)
    assert s.extra["steps"] == 2 * (96 // 32) and math.isfinite(s.extra["final_train_loss"])
    assert 0.0 <= s.values["top1"] <= 100.0


def test_two_runs_identical_and_global_rng_untouched(tmp_path):
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    state = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone())
    a = _task(epochs=1, warmup_epochs=0).run(_encoder(), _ctx(tmp_path))
    assert random.getstate() == state[0] and np.array_equal(np.random.get_state()[1], state[1])
    assert torch.equal(torch.get_rng_state(), state[2])
    # a different caller state changes nothing
    random.seed(2), np.random.seed(2), torch.manual_seed(2)
    b = _task(epochs=1, warmup_epochs=0).run(_encoder(), _ctx(tmp_path))
    assert a.values == b.values and a.extra["final_train_loss"] == b.extra["final_train_loss"]


def test_label_fraction_uses_class_balanced_subset(tmp_path):
    from tasks.subsets import class_balanced_subset, subset_digest

    ds = load_dataset_splits("digits")
    ds = dataclasses.replace(ds, test=ds.test.subset(np.arange(20)))
    s = _task(epochs=1, warmup_epochs=0, label_fraction=0.1).run(_encoder(), _ctx(tmp_path, ds))
    idx = class_balanced_subset(ds.train.labels, 0.1, 0, 10)
    assert s.extra["subset_digest"] == subset_digest(idx) and s.extra["subset_size"] == idx.size
    assert s.extra["per_class_min"] == s.extra["per_class_max"] == s.extra["per_class"]


def test_target_dataset_replaces_the_cell_dataset(tmp_path):
    task = _task(epochs=1, warmup_epochs=0, label_fraction=0.1, target="digits")
    assert (
        task_datasets("finetune", config_dict(task.cfg)) == ("digits",)
        and task_datasets("finetune", config_dict(_task().cfg)) == ()
    )
    assert (
        task.card().card_id != _task(epochs=1, warmup_epochs=0, label_fraction=0.1).card().card_id
    )
    # the context holds a 96/40-image slice; the target is all of digits
    s = task.run(_encoder(), _ctx(tmp_path))
    full = load_dataset_splits("digits")
    assert s.extra["dataset"] == "digits" and s.extra["test_samples"] == len(full.test)
    assert s.extra["subset_size"] == 150 and "on digits" in s.card.summary


def test_resnet_encoder_is_fine_tuned_without_drop_path(tmp_path):
    s = _task(epochs=1, warmup_epochs=0).run(_encoder("resnet_micro"), _ctx(tmp_path))
    assert s.extra["drop_path_applied"] is False and s.extra["layers"] == 6
    assert 0.0 <= s.values["top1"] <= 100.0


def test_unsupported_encoder_is_not_applicable(tmp_path):
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(768, 8))
    enc = Encoder(
        module=module,
        feat_dim=8,
        backbone="mlp",
        fingerprint="x",
        input_size=16,
        mean=(0.3,) * 3,
        std=(0.3,) * 3,
    )
    with pytest.raises(TaskNotApplicable):
        _task().run(enc, _ctx(tmp_path))


def test_fedmae_cell_runs_finetune(tmp_path):
    """FedMAE's smoke cell with the fine-tuning card: the exported cascade is fine-tuned inside a
    real cell."""
    from benchmark.engine.runner import run_cell
    from tests.helpers import smoke_cell

    cell = smoke_cell("fedmae", tasks=[{"name": "finetune", "epochs": 1, "warmup_epochs": 0}])
    record = run_cell(cell, tmp_path, device="cpu")
    assert record is not None
    (score,) = [s for s in record.scores if s.task == "finetune"]
    assert score.card.name == "finetune/fedmae" and score.extra["drop_path_applied"] is True
    assert 0.0 <= score.values["top1"] <= 100.0


@pytest.mark.slow
def test_fine_tuning_learns_on_digits(tmp_path):
    """The loop really trains (layer-scaled lrs, schedule, loss): a short run without the heavy
    regularisers beats chance (10 %) clearly on digits from a random ViT."""
    ds = load_dataset_splits("digits")
    s = _task(
        epochs=12,
        warmup_epochs=1,
        blr=4e-3,
        rand_augment="",
        reprob=0.0,
        mixup=0.0,
        cutmix=0.0,
        crop_scale=(0.5, 1.0),
        flip_p=0.0,
    ).run(_encoder(), _ctx(tmp_path, ds))
    assert s.values["top1"] > 30.0, s.values


def test_a_card_never_claims_the_mae_recipe_for_a_config_that_departs_from_it() -> None:
    """The quickstart fine-tunes under a recipe sized for digits: its card says so (source and
    summary), field by field, while the default config's card is the committed MAE-recipe card, word
    for word."""
    from tasks.cards import load_card
    from tasks.finetuning.finetune import Finetune, FinetuneConfig, recipe_departures

    default = Finetune(FinetuneConfig()).card()
    assert load_card("finetune/fedmae").matches(default) and "MAE recipe" in default.summary
    assert (
        "DEVIATION" not in default.settings["source"] and recipe_departures(FinetuneConfig()) == {}
    )
    digits = FinetuneConfig(
        epochs=50, rand_augment="", mixup=0.0, cutmix=0.0, reprob=0.0, layer_decay=1.0, blr=0.004
    )
    card = Finetune(digits).card()
    assert "DEVIATION" in card.settings["source"] and "not the MAE recipe" in card.summary
    assert recipe_departures(digits) == {
        "blr": 0.004,
        "layer_decay": 1.0,
        "rand_augment": "off",
        "mixup": 0.0,
        "cutmix": 0.0,
        "reprob": 0.0,
    }
    assert all(f"{k}=" in card.settings["source"] for k in recipe_departures(digits))
    # FedMAE §5.1's own field, not the recipe
    assert "epochs" not in recipe_departures(FinetuneConfig(epochs=50))


def test_fine_tune_reports_the_first_non_finite_step_without_reading_each_loss() -> None:
    """The loop keeps the divergence check on the device (no host read per step) and still names
    the step where the loss first became non-finite; a finite run's last loss is the last step's."""
    import pytest
    import torch

    from benchmark.api import Diverged
    from tasks.finetuning import classifier

    seen = {"n": 0}

    def run(bad_from: int | None, steps: int) -> tuple[int, float]:
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        seen["n"] = 0

        def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            seen["n"] += 1
            loss = torch.nn.functional.cross_entropy(out, target)
            return loss * float("nan") if bad_from and seen["n"] >= bad_from else loss

        batches = [(torch.randn(4, 3), torch.tensor([0, 1, 0, 1])) for _ in range(steps)]
        return classifier.fine_tune(model, batches, opt, loss_fn=loss_fn, what="test")

    steps, last = run(None, 5)
    assert steps == 5 and last > 0
    with pytest.raises(Diverged, match=r"test loss became nan at step 3"):
        run(3, 5)
    # a check every DIVERGENCE_CHECK_STEPS: a long diverged run is stopped there, not at its end
    n = classifier.DIVERGENCE_CHECK_STEPS
    with pytest.raises(Diverged, match=rf"at step {n - 1}\b"):
        run(n - 1, 3 * n)
    assert seen["n"] == n


@pytest.mark.parametrize(
    ("recipe", "size"),
    [
        # the embedded default's recipe: crop + resize on PIL, then ToTensor and Normalize (batched)
        ({"crop_scale": [0.2, 1.0], "flip_p": 0.0, "rand_augment": "", "reprob": 0.0}, 16),
        # the same to another size (every crop resized), and crops that are mostly the whole image
        # (the resize skipped)
        ({"crop_scale": [0.2, 1.0], "flip_p": 0.0, "rand_augment": "", "reprob": 0.0}, 20),
        ({"crop_scale": [0.95, 1.0], "flip_p": 0.0, "rand_augment": "", "reprob": 0.0}, 16),
        # MAE's own: RandAugment and a flip before, RandomErasing after (image by image throughout)
        ({}, 16),
    ],
)
def test_transform_batch_is_the_per_image_transform_bit_for_bit(recipe, size) -> None:
    """transform_batch converts and normalises the batch at once where the recipe allows it, and
    for the embedded recipe crops every image out of one Pillow picture of the batch (issue 53):
    the same draws, the same values as applying the timm transform to each image."""
    from PIL import Image

    from tasks.finetuning.finetune import train_transform, transform_batch

    ds = load_dataset_splits("digits", {"size": 16})
    images = ds.train.images[:48]
    transform = train_transform(
        from_mapping(FinetuneConfig, recipe), size, tuple(ds.mean), tuple(ds.std)
    )

    def seeded() -> None:
        random.seed(3)
        np.random.seed(3)
        torch.manual_seed(3)

    seeded()
    arr = images.permute(0, 2, 3, 1).contiguous().numpy()
    expected = torch.stack([transform(Image.fromarray(a)) for a in arr])
    after = random.getstate()
    seeded()
    got = transform_batch(images, transform)
    assert got.dtype == expected.dtype and got.shape == expected.shape == (48, 3, size, size)
    assert torch.equal(got, expected)
    assert random.getstate() == after  # the same draws, no more
    # the draws differ between images: a batch that repeated one image's crop would not be equal
    assert not torch.equal(got[0], got[1])
