"""Every data-root dataset loads from a fixture in exactly the hub's format
(tests/benchmark/data/hub_fixtures.py), a wrong column ends in the loader's own one-line error with
the prefetch hint, and the decoded cache counts only when complete."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmark.contracts.registries import DATASETS, load_builtins
from benchmark.data.datasets import DatasetUnavailable, cache_complete, load_dataset_splits
from benchmark.data.hub_datasets import CocoLayout, imagenet100_classes, imagenet100_names
from tests.benchmark.data import hub_fixtures as fx

pytest.importorskip("datasets")
load_builtins()

# name -> (builder, params, train shape, test labels, number of classes)
CASES = {
    "cifar10": (fx.cifar10, {}, (4, 3, 32, 32), [1, 2], 10),
    "cifar100": (fx.cifar100, {}, (3, 3, 32, 32), [7, 8], 100),
    "tiny_imagenet": (fx.tiny_imagenet, {}, (4, 3, 64, 64), [3, 199], 200),
    "imagenet100": (
        lambda root: fx.imagenet100(root, imagenet100_names()),
        {"size": 32},
        (3, 3, 32, 32),
        [5, 6],
        100,
    ),
    "stl10": (fx.stl10, {}, (3, 3, 96, 96), [2, 2], 10),
    "mini_imagenet": (fx.mini_imagenet, {"size": 24}, (3, 3, 24, 24), [3, 4], 100),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hub_format_fixture_loads(name: str, tmp_path: Path) -> None:
    build, params, shape, test_labels, classes = CASES[name]
    build(tmp_path)
    ds = load_dataset_splits(name, params, tmp_path)
    assert tuple(ds.train.images.shape) == shape and str(ds.train.images.dtype) == "torch.uint8"
    assert list(ds.test.labels) == test_labels and ds.num_classes == classes
    cfg = DATASETS.get(name)(**params)
    assert cache_complete(cfg.cache_path(tmp_path))
    again = cfg.load(tmp_path)  # from the cache
    assert (
        np.array_equal(again.train.images.numpy(), ds.train.images.numpy())
        and again.revision == ds.revision
    )


def test_cifar_pixels_and_labels_are_the_stored_ones(tmp_path: Path) -> None:
    fx.cifar100(tmp_path)
    ds = load_dataset_splits("cifar100", {}, tmp_path)
    first = np.asarray(fx.pil_images(3, 32, 32, 2)[0]).transpose(2, 0, 1)
    assert np.array_equal(ds.train.images[0].numpy(), first)
    assert list(ds.train.labels) == [0, 99, 50]  # fine_label, not coarse_label


def test_coco_layout_fixture(tmp_path: Path) -> None:
    fx.coco(tmp_path)
    layout = load_dataset_splits("coco2017", {}, tmp_path)
    assert isinstance(layout, CocoLayout) and layout.val_images == tmp_path / "coco" / "val2017"


WRONG = {  # a copy from another source, with a column the hub's card does not have
    "cifar10": lambda root: fx.cifar10(root, image_column="image"),
    "cifar100": lambda root: fx.cifar100(root, label_column="label"),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_column_is_the_loaders_one_line_error_with_the_prefetch_hint(
    name: str, tmp_path: Path
) -> None:
    WRONG[name](tmp_path)
    with pytest.raises(DatasetUnavailable) as info:
        load_dataset_splits(name, {}, tmp_path)
    msg = str(info.value)
    assert (
        "\n" not in msg
        and "expected columns" in msg
        and f"python -m benchmark prefetch {name}" in msg
    )


def test_imagenet100_checks_the_class_order_on_names_as_served(tmp_path: Path) -> None:
    names = imagenet100_names()
    assert names[:3] == [
        "bonnet, poke bonnet",
        "green mamba",
        "langur",
    ]  # clane9/imagenet-100's card
    swapped = [names[1], names[0], *names[2:]]
    fx.imagenet100(tmp_path, swapped)
    with pytest.raises(DatasetUnavailable, match="green mamba") as info:
        DATASETS.get("imagenet100")(size=32).load(tmp_path)
    assert "\n" not in str(info.value)


def test_imagenet100_accepts_a_wnid_labelled_copy_in_cmc_order(tmp_path: Path) -> None:
    fx.imagenet100(tmp_path, imagenet100_classes())
    assert DATASETS.get("imagenet100")(size=32).load(tmp_path).num_classes == 100


def test_only_a_complete_cache_counts_as_available(tmp_path: Path) -> None:
    fx.cifar10(tmp_path)
    cfg = DATASETS.get("cifar10")()
    cfg.load(tmp_path)
    cache = cfg.cache_path(tmp_path)
    (tmp_path / "cifar10" / "dataset_dict.json").unlink()  # only the cache is left
    assert cfg.available(tmp_path)
    data = cache.read_bytes()
    cache.write_bytes(data[: len(data) // 2])  # a write cut short
    assert not cfg.available(tmp_path)
    cache.unlink()
    (tmp_path / "cifar10" / "other.npz").write_bytes(data)  # a foreign .npz is not this cache
    assert not cfg.available(tmp_path)
    with pytest.raises(DatasetUnavailable, match="prefetch cifar10"):
        cfg.load(tmp_path)


def test_the_cache_is_written_under_a_temporary_name_then_renamed(
    tmp_path: Path, monkeypatch
) -> None:
    fx.stl10(tmp_path)
    cfg = DATASETS.get("stl10")()
    seen: list[tuple[str, bool]] = []
    real_savez = np.savez

    def spy(file, **arrays):
        seen.append((Path(file.name).name, cfg.cache_path(tmp_path).exists()))
        return real_savez(file, **arrays)

    monkeypatch.setattr(np, "savez", spy)
    cfg.load(tmp_path)
    ((written, existed),) = seen
    assert not written.endswith(".npz") and not existed and cache_complete(cfg.cache_path(tmp_path))
    assert [p.name for p in (tmp_path / "stl10").iterdir() if ".part" in p.name] == []


# every hub format at a chosen size (benchmark/data/hub_formats.py: doctor --calibrate's data)
LOAD_PARAMS = {"imagenet100": {"size": 24}, "mini_imagenet": {"size": 24}}


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_copies_load_in_their_hub_format_with_every_class(name: str, tmp_path) -> None:
    import datasets

    from benchmark.data.hub_formats import FORMATS, JPEG_SIZES, hub_labels, write_hub_dataset

    fmt = FORMATS[name]
    n = len(fmt.names()) + 7  # every class, some twice
    write_hub_dataset(name, tmp_path, train=n, test=5, seed=4)
    ds = load_dataset_splits(name, LOAD_PARAMS.get(name, {}), tmp_path)
    side = LOAD_PARAMS.get(name, {}).get("size") or fmt.size[0]
    assert tuple(ds.train.images.shape) == (n, 3, side, side) and len(ds.test) == 5
    assert list(ds.train.labels) == hub_labels(name, n, seed=4).tolist()
    assert sorted(set(ds.train.labels.tolist())) == list(range(len(fmt.names())))
    assert ds.num_classes == len(fmt.names())
    stored = datasets.load_from_disk(str(tmp_path / name))
    assert set(stored) == {fmt.train_split, fmt.test_split, *fmt.extra_splits}
    train = stored[fmt.train_split].cast_column(fmt.image_column, datasets.Image(decode=False))
    raw = [cell["bytes"] for cell in train[fmt.image_column][:3]]
    if fmt.size is None:  # the JPEG sets: JPEG bytes of assorted sizes, as the hub stores them
        from io import BytesIO

        from PIL import Image

        assert all(b[:2] == b"\xff\xd8" for b in raw)
        assert [Image.open(BytesIO(b)).size for b in raw] == list(JPEG_SIZES)
    else:
        assert all(b[:4] == b"\x89PNG" for b in raw)


@pytest.mark.parametrize("name", ["cifar10", "mini_imagenet"])
def test_images_encoded_in_worker_processes_are_the_same_bytes(name: str, monkeypatch) -> None:
    from benchmark.data import hub_formats as hf

    serial = hf._image_cells(hf.FORMATS[name], hf.CHUNK + 9, seed=5)
    monkeypatch.setattr(hf, "PARALLEL_FROM", 1)
    monkeypatch.setattr(hf.os, "cpu_count", lambda: 3)
    assert hf._image_cells(hf.FORMATS[name], hf.CHUNK + 9, seed=5) == serial
