"""``transfer-linear@v1`` (docs/protocols/evaluation.md §3.6): target loading, resizing, subsets,
and the unavailable message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.api import (
    TASKS,
    Encoder,
    Stream,
    TaskContext,
    arch_fingerprint,
    build_backbone,
    from_mapping,
    scoped_torch_seed,
)
from benchmark.data.datasets import DatasetUnavailable, load_dataset_splits
from tasks.probes.transfer import resize_split


def _encoder() -> Encoder:
    with scoped_torch_seed(0, Stream.INIT):
        module, dim = build_backbone("resnet_micro", {"width": 4})
    return Encoder(
        module=module,
        feat_dim=dim,
        backbone="resnet_micro",
        fingerprint=arch_fingerprint(module),
        input_size=16,
        mean=(0.5,) * 3,
        std=(0.25,) * 3,
    )


def _ctx(root: Path) -> TaskContext:
    return TaskContext(
        dataset=load_dataset_splits("digits"),
        data_root=root,
        out_dir=root,
        device=torch.device("cpu"),
        seed=0,
        feature_cache={},
    )


def _task(**params):
    cls = TASKS.get("transfer")
    return cls(from_mapping(cls.Config, {"epochs": 2, **params}))


def _fake_stl10(root: Path, n_train: int = 40, n_test: int = 20) -> None:
    """A tiny STL-10 in the HF save_to_disk layout that ``prefetch`` produces (96×96 RGB, 10
    classes)."""
    import datasets
    from PIL import Image

    rng = np.random.default_rng(0)

    def split(n: int) -> datasets.Dataset:
        labels = np.arange(n) % 10
        imgs = [
            Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)) for _ in range(n)
        ]
        return datasets.Dataset.from_dict(
            {"image": imgs, "label": labels.tolist()},
            features=datasets.Features(
                {"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)}
            ),
        )

    datasets.DatasetDict({"train": split(n_train), "test": split(n_test)}).save_to_disk(
        str(root / "stl10")
    )


def test_stl10_fixture_loads_resizes_and_probes(tmp_path):
    _fake_stl10(tmp_path)
    ds = load_dataset_splits("stl10", {}, tmp_path)
    assert (
        tuple(ds.train.images.shape) == (40, 3, 96, 96)
        and ds.num_classes == 10
        and len(ds.test) == 20
    )
    s = _task(target="stl10", target_resolution=16, label_fraction=0.5).run(
        _encoder(), _ctx(tmp_path)
    )
    # 2 per class; full test split
    assert s.extra["train_samples"] == 20 and s.extra["test_samples"] == 20
    assert 0 <= s.values["top1"] <= 100 and s.card.settings["target"] == "stl10"


def test_missing_target_fails_with_the_prefetch_hint(tmp_path):
    with pytest.raises(DatasetUnavailable, match="prefetch stl10"):
        _task(target="stl10").run(_encoder(), _ctx(tmp_path / "empty"))


def test_digits_as_target_is_a_real_probe_and_deterministic(tmp_path):
    a = _task(target="digits", target_resolution=16, epochs=10, batch_size=128, lr=0.01).run(
        _encoder(), _ctx(tmp_path)
    )
    b = _task(target="digits", target_resolution=16, epochs=10, batch_size=128, lr=0.01).run(
        _encoder(), _ctx(tmp_path)
    )
    assert a.values == b.values
    assert a.values["top1"] > 30.0, a.values  # chance is 10 %
    assert a.extra["test_samples"] == len(load_dataset_splits("digits").test)


def test_resize_is_antialiased_bilinear_and_identity_at_size():
    img = torch.zeros(1, 3, 96, 96, dtype=torch.uint8)
    img[..., ::2, :] = 255  # a stripe pattern: antialiasing averages it to grey instead of aliasing
    split = load_dataset_splits("digits").train.subset(np.arange(1))
    out = resize_split(type(split)(img, np.zeros(1, dtype=np.int64), 10), 32)
    assert out.images.shape[-1] == 32 and 100 < float(out.images.float().mean()) < 155
    # plain bilinear sampling would give 0/255 rows (std ~127)
    assert float(out.images.float().std()) < 30
    assert resize_split(split, split.images.shape[-1]) is split


def test_card_keys_target_resolution_and_fraction():
    base = _task().card()
    assert base.name == "transfer-linear@v1" and base.settings["resolution"] == 32
    assert _task(target_resolution=96).card().card_id != base.card_id
    assert _task(label_fraction=0.1).card().card_id != base.card_id
    assert _task(target="cifar10").card().card_id != base.card_id
