"""Offline fixtures in the hub datasets' own format (a tiny ``datasets.DatasetDict`` saved with
``save_to_disk``, same column names, features and split names as the hub card), loaded through the
registry with a data root."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmark.contracts.registries import DATASETS, load_builtins
from benchmark.data.datasets import DatasetUnavailable, load_dataset_splits
from benchmark.data.hub_datasets import CocoLayout, imagenet100_classes, resize_center_crop

datasets = pytest.importorskip("datasets")
load_builtins()


def _images(n: int, w: int, h: int, seed: int, mode: str = "RGB") -> list:
    from PIL import Image

    rs = np.random.RandomState(seed)
    out = []
    for _ in range(n):
        arr = rs.randint(0, 256, size=(h, w, 3), dtype=np.uint8)
        img = Image.fromarray(arr)
        out.append(img.convert(mode))
    return out


def _save(
    root: Path, name: str, splits: dict[str, tuple[list, list[int]]], label_names: list[str]
) -> None:
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=label_names)}
    )
    dd = datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict({"image": imgs, "label": labels}, features=features)
            for split, (imgs, labels) in splits.items()
        }
    )
    dd.save_to_disk(str(root / name))


def test_tiny_imagenet_fixture_loads_through_registry(tmp_path: Path) -> None:
    # zh-plus/tiny-imagenet: image + label (200 wnids), splits train / valid; a few images are
    # greyscale ("L")
    names = [f"n{i:08d}" for i in range(200)]
    _save(
        tmp_path,
        "tiny_imagenet",
        {
            "train": (
                _images(5, 64, 64, 0) + _images(1, 64, 64, 1, mode="L"),
                [0, 1, 2, 199, 5, 7],
            ),
            "valid": (_images(3, 64, 64, 2), [3, 1, 199]),
        },
        names,
    )
    ds = load_dataset_splits("tiny-imagenet", {}, tmp_path)  # alias resolves
    assert (
        ds.train.images.shape == (6, 3, 64, 64) and ds.train.images.dtype.is_floating_point is False
    )
    assert ds.test.images.shape == (3, 3, 64, 64)
    assert ds.num_classes == 200  # from the ClassLabel feature, not the labels seen
    assert list(ds.test.labels) == [3, 1, 199]
    # 64×64 images are stored bit for bit (no resampling at the native size)
    first = np.asarray(_images(1, 64, 64, 0)[0]).transpose(2, 0, 1)
    assert np.array_equal(ds.train.images[0].numpy(), first)
    # the decoded cache is reused on the next load (a new data root key, same folder)
    assert (tmp_path / "tiny_imagenet" / "_fssl_uint8_64.npz").exists()
    again = DATASETS.get("tiny_imagenet")().load(tmp_path)
    assert (
        np.array_equal(again.train.images.numpy(), ds.train.images.numpy())
        and again.revision == ds.revision
    )


def test_imagenet100_fixture_resizes_and_checks_the_class_list(tmp_path: Path) -> None:
    # clane9/imagenet-100: image + label (100 classes in CMC order), splits train / validation;
    # JPEGs of any size
    classes = imagenet100_classes()
    _save(
        tmp_path,
        "imagenet100",
        {
            "train": (_images(2, 80, 60, 0) + _images(1, 50, 90, 1), [0, 99, 42]),
            "validation": (_images(2, 64, 64, 2), [5, 6]),
        },
        classes,
    )
    ds = load_dataset_splits("imagenet100", {"size": 32}, tmp_path)
    assert ds.train.images.shape == (3, 3, 32, 32) and ds.test.images.shape == (2, 3, 32, 32)
    assert ds.num_classes == 100 and list(ds.train.labels) == [0, 99, 42]
    assert ds.mean == (0.485, 0.456, 0.406)


def test_imagenet100_rejects_a_copy_with_another_class_order(tmp_path: Path) -> None:
    classes = imagenet100_classes()
    _save(
        tmp_path,
        "imagenet100",
        {
            "train": (_images(1, 32, 32, 0), [0]),
            "validation": (_images(1, 32, 32, 1), [0]),
        },
        sorted(classes),
    )  # ImageFolder order instead of CMC's
    with pytest.raises(DatasetUnavailable, match="imagenet100_classes.txt"):
        DATASETS.get("imagenet100")(size=32).load(tmp_path)


def test_imagenet100_class_list_is_cmc() -> None:
    classes = imagenet100_classes()
    assert len(classes) == 100 and len(set(classes)) == 100
    # first and last lines of github.com/HobbitLong/CMC imagenet100.txt
    assert classes[:3] == ["n02869837", "n01749939", "n02488291"] and classes[-1] == "n02090622"


def test_mini_imagenet_fixture_uses_train_and_validation(tmp_path: Path) -> None:
    # timm/mini-imagenet: image + label (100 wnids), splits train / validation / test (test unused)
    names = [f"n{i:08d}" for i in range(100)]
    _save(
        tmp_path,
        "mini_imagenet",
        {
            "train": (_images(3, 100, 75, 0), [0, 1, 2]),
            "validation": (_images(2, 75, 100, 1), [3, 4]),
            "test": (_images(1, 64, 64, 2), [9]),
        },
        names,
    )
    ds = load_dataset_splits("mini_imagenet", {"size": 24}, tmp_path)
    assert ds.train.images.shape == (3, 3, 24, 24)
    assert list(ds.test.labels) == [3, 4] and ds.num_classes == 100


def test_resize_center_crop_keeps_the_centre() -> None:
    from PIL import Image

    # 80 wide, 40 high: black margins, white centre (columns 12-67)
    arr = np.zeros((40, 80, 3), dtype=np.uint8)
    arr[:, 12:68] = 255
    # 80×40 → 40×20 → the central 20×20 = columns 20-59
    out = resize_center_crop(Image.fromarray(arr), 20)
    assert out.shape == (20, 20, 3) and out.min() >= 250


@pytest.mark.parametrize("name", ["tiny_imagenet", "imagenet100", "mini_imagenet"])
def test_missing_hub_dataset_raises_with_the_prefetch_hint(tmp_path: Path, name: str) -> None:
    cfg = DATASETS.get(name)()
    assert not cfg.available(tmp_path)
    with pytest.raises(DatasetUnavailable, match=f"python -m benchmark prefetch {name}"):
        load_dataset_splits(name, {}, tmp_path)


def test_wrong_columns_are_reported(tmp_path: Path) -> None:
    features = datasets.Features(
        {"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=200)}
    )
    dd = datasets.DatasetDict(
        {
            s: datasets.Dataset.from_dict(
                {"img": _images(1, 64, 64, 0), "label": [0]}, features=features
            )
            for s in ("train", "valid")
        }
    )
    dd.save_to_disk(str(tmp_path / "tiny_imagenet"))
    with pytest.raises(DatasetUnavailable, match="expected columns"):
        DATASETS.get("tiny_imagenet")().load(tmp_path)


def _coco_fixture(root: Path) -> None:
    coco = root / "coco"
    for split in ("train2017", "val2017"):
        (coco / split).mkdir(parents=True)
        _images(1, 40, 30, 0)[0].save(coco / split / "000000000001.jpg")
    (coco / "annotations").mkdir()
    ann = {
        "images": [{"id": 1, "file_name": "000000000001.jpg", "width": 40, "height": 30}],
        "annotations": [
            {
                "id": 1,
                "image_id": 1,
                "category_id": 1,
                "bbox": [2, 3, 10, 12],
                "area": 120,
                "iscrowd": 0,
                "segmentation": [[2, 3, 12, 3, 12, 15, 2, 15]],
            }
        ],
        "categories": [{"id": 1, "name": "person", "supercategory": "person"}],
    }
    for split in ("train2017", "val2017"):
        (coco / "annotations" / f"instances_{split}.json").write_text(json.dumps(ann))


def test_coco2017_locates_the_layout_under_the_data_root(tmp_path: Path) -> None:
    _coco_fixture(tmp_path)
    layout = load_dataset_splits("coco2017", {}, tmp_path)
    assert isinstance(layout, CocoLayout)
    assert layout.val_annotations == tmp_path / "coco" / "annotations" / "instances_val2017.json"
    assert (
        layout.train_images.is_dir()
        and layout.splits()["val2017"][1] == tmp_path / "coco" / "val2017"
    )
    assert DATASETS.get("coco")().categories(tmp_path)[0]["name"] == "person"


def test_coco2017_missing_lists_what_is_absent_and_how_to_get_it(tmp_path: Path) -> None:
    _coco_fixture(tmp_path)
    (tmp_path / "coco" / "annotations" / "instances_train2017.json").unlink()
    cfg = DATASETS.get("coco2017")()
    assert not cfg.available(tmp_path)
    with pytest.raises(DatasetUnavailable) as exc:
        cfg.load(tmp_path)
    msg = str(exc.value)
    assert "instances_train2017.json" in msg and "python -m benchmark prefetch coco2017" in msg
    assert "annotations_trainval2017.zip" in msg
    with pytest.raises(DatasetUnavailable):
        cfg.load(tmp_path / "empty")
