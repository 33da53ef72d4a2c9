"""Tiny copies of the hub datasets in exactly the hub's format, built offline with ``datasets``.

Each builder writes what ``python -m benchmark prefetch NAME`` would save
(``DatasetDict.save_to_disk``): the hub card's column names, feature types (Image, ClassLabel with
the names as served) and split names. Facts from the cards: uoft-cs/cifar10 (img, label),
uoft-cs/cifar100 (img, fine_label, coarse_label), zh-plus/tiny-imagenet (image, label with wnid
names; train/valid), clane9/imagenet-100 (image, label with human-readable names in CMC order;
train/validation; JPEGs of any size), tanganke/stl10 (image, label; train/test, 96 px),
timm/mini-imagenet (image, label with wnid names; train/validation/test). COCO 2017 is a folder
layout, not a hub set. The same formats at any size: benchmark/data/hub_formats.py."""

from __future__ import annotations

import json
from pathlib import Path

# the formats' facts and the image helpers are the package's, shared with doctor --calibrate's
# generated datasets (benchmark/data/hub_formats.py)
from benchmark.data.hub_formats import (
    CIFAR10_NAMES,
    CIFAR100_COARSE,
    CIFAR100_FINE,
    STL10_NAMES,
    jpeg_cells,
    pil_images,
    save,
    wnids,
)

__all__ = [
    "CIFAR10_NAMES",
    "CIFAR100_COARSE",
    "CIFAR100_FINE",
    "STL10_NAMES",
    "jpeg_cells",
    "pil_images",
    "save",
    "wnids",
]


def cifar10(root: Path, image_column: str = "img") -> Path:
    import datasets

    feats = {image_column: datasets.Image(), "label": datasets.ClassLabel(names=CIFAR10_NAMES)}
    return save(
        root,
        "cifar10",
        feats,
        {
            "train": {image_column: pil_images(4, 32, 32, 0), "label": [0, 9, 3, 3]},
            "test": {image_column: pil_images(2, 32, 32, 1), "label": [1, 2]},
        },
    )


def cifar100(root: Path, label_column: str = "fine_label") -> Path:
    import datasets

    feats = {
        "img": datasets.Image(),
        label_column: datasets.ClassLabel(names=CIFAR100_FINE),
        "coarse_label": datasets.ClassLabel(names=CIFAR100_COARSE),
    }
    return save(
        root,
        "cifar100",
        feats,
        {
            "train": {
                "img": pil_images(3, 32, 32, 2),
                label_column: [0, 99, 50],
                "coarse_label": [4, 13, 16],
            },
            "test": {
                "img": pil_images(2, 32, 32, 3),
                label_column: [7, 8],
                "coarse_label": [7, 18],
            },
        },
    )


def tiny_imagenet(root: Path) -> Path:
    import datasets

    feats = {"image": datasets.Image(), "label": datasets.ClassLabel(names=wnids(200, 0))}
    return save(
        root,
        "tiny_imagenet",
        feats,
        {  # a few Tiny-ImageNet images are greyscale ("L")
            "train": {
                "image": pil_images(3, 64, 64, 4) + pil_images(1, 64, 64, 5, "L"),
                "label": [0, 1, 199, 5],
            },
            "valid": {"image": pil_images(2, 64, 64, 6), "label": [3, 199]},
        },
    )


def imagenet100(root: Path, names: list[str]) -> Path:
    import datasets

    feats = {"image": datasets.Image(), "label": datasets.ClassLabel(names=names)}
    return save(
        root,
        "imagenet100",
        feats,
        {
            "train": {
                "image": jpeg_cells(pil_images(2, 80, 60, 7) + pil_images(1, 50, 90, 8)),
                "label": [0, 99, 42],
            },
            "validation": {"image": jpeg_cells(pil_images(2, 64, 64, 9)), "label": [5, 6]},
        },
    )


def stl10(root: Path) -> Path:
    import datasets

    feats = {"image": datasets.Image(), "label": datasets.ClassLabel(names=STL10_NAMES)}
    return save(
        root,
        "stl10",
        feats,
        {
            "train": {"image": pil_images(3, 96, 96, 10), "label": [0, 7, 9]},
            "test": {"image": pil_images(2, 96, 96, 11), "label": [2, 2]},
        },
    )


def mini_imagenet(root: Path) -> Path:
    import datasets

    feats = {"image": datasets.Image(), "label": datasets.ClassLabel(names=wnids(100, 1))}
    return save(
        root,
        "mini_imagenet",
        feats,
        {
            "train": {"image": jpeg_cells(pil_images(3, 100, 75, 12)), "label": [0, 1, 2]},
            "validation": {"image": jpeg_cells(pil_images(2, 75, 100, 13)), "label": [3, 4]},
            "test": {"image": jpeg_cells(pil_images(1, 64, 64, 14)), "label": [9]},
        },
    )


def coco(root: Path) -> Path:
    """COCO 2017's layout: train2017/, val2017/ and annotations/instances_{split}.json."""
    folder = root / "coco"
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
    (folder / "annotations").mkdir(parents=True)
    for split in ("train2017", "val2017"):
        (folder / split).mkdir()
        pil_images(1, 40, 30, 0)[0].save(folder / split / "000000000001.jpg")
        (folder / "annotations" / f"instances_{split}.json").write_text(json.dumps(ann))
    return folder
