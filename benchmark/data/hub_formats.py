"""Local copies of the hub datasets in exactly the format ``python -m benchmark prefetch NAME``
saves (``DatasetDict.save_to_disk``), generated on this machine: nothing is downloaded.

The column names, feature types (Image, ClassLabel with the names as served) and split names are the
hub cards' (the facts are listed in ``benchmark/data/hub_datasets.py``): uoft-cs/cifar10 (img,
label), uoft-cs/cifar100 (img, fine_label, coarse_label), zh-plus/tiny-imagenet (image, label with
wnid names; train/valid), clane9/imagenet-100 (image, label with the human-readable names in CMC
order; train/validation; JPEGs of any size), tanganke/stl10 (image, label; train/test, 96 px),
timm/mini-imagenet (image, label with wnid names; train/validation/test; JPEGs).

Two users: the tests' fixtures (``tests/benchmark/data/hub_fixtures.py``: a handful of rows with
fixed labels) and ``doctor --calibrate`` (:func:`write_hub_dataset`: a client's worth of rows, so
that a calibration cell reads, decodes, caches and trains on data in the format a real run reads).
The pixels carry no information; the loader, the decoded cache and the training step cannot tell.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CIFAR10_NAMES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]
CIFAR100_FINE = [
    "apple",
    "aquarium_fish",
    "baby",
    "bear",
    "beaver",
    "bed",
    "bee",
    "beetle",
    "bicycle",
    "bottle",
    "bowl",
    "boy",
    "bridge",
    "bus",
    "butterfly",
    "camel",
    "can",
    "castle",
    "caterpillar",
    "cattle",
    "chair",
    "chimpanzee",
    "clock",
    "cloud",
    "cockroach",
    "couch",
    "crab",
    "crocodile",
    "cup",
    "dinosaur",
    "dolphin",
    "elephant",
    "flatfish",
    "forest",
    "fox",
    "girl",
    "hamster",
    "house",
    "kangaroo",
    "keyboard",
    "lamp",
    "lawn_mower",
    "leopard",
    "lion",
    "lizard",
    "lobster",
    "man",
    "maple_tree",
    "motorcycle",
    "mountain",
    "mouse",
    "mushroom",
    "oak_tree",
    "orange",
    "orchid",
    "otter",
    "palm_tree",
    "pear",
    "pickup_truck",
    "pine_tree",
    "plain",
    "plate",
    "poppy",
    "porcupine",
    "possum",
    "rabbit",
    "raccoon",
    "ray",
    "road",
    "rocket",
    "rose",
    "sea",
    "seal",
    "shark",
    "shrew",
    "skunk",
    "skyscraper",
    "snail",
    "snake",
    "spider",
    "squirrel",
    "streetcar",
    "sunflower",
    "sweet_pepper",
    "table",
    "tank",
    "telephone",
    "television",
    "tiger",
    "tractor",
    "train",
    "trout",
    "tulip",
    "turtle",
    "wardrobe",
    "whale",
    "willow_tree",
    "wolf",
    "woman",
    "worm",
]
CIFAR100_COARSE = [
    "aquatic_mammals",
    "fish",
    "flowers",
    "food_containers",
    "fruit_and_vegetables",
    "household_electrical_devices",
    "household_furniture",
    "insects",
    "large_carnivores",
    "large_man-made_outdoor_things",
    "large_natural_outdoor_scenes",
    "large_omnivores_and_herbivores",
    "medium_mammals",
    "non-insect_invertebrates",
    "people",
    "reptiles",
    "small_mammals",
    "trees",
    "vehicles_1",
    "vehicles_2",
]
STL10_NAMES = ["airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck"]


def wnids(n: int, seed: int) -> list[str]:
    """n distinct wnid-shaped names (nXXXXXXXX), sorted as the hub's ClassLabels list them."""
    rs = np.random.RandomState(seed)
    return sorted(f"n{v:08d}" for v in rs.choice(10**7, size=n, replace=False) + 10**6)


def pil_images(n: int, w: int, h: int, seed: int, mode: str = "RGB") -> list:
    """n images of uniform noise (the fixtures' pixels: every byte differs, so a wrong crop shows)."""
    from PIL import Image

    rs = np.random.RandomState(seed)
    return [
        Image.fromarray(rs.randint(0, 256, size=(h, w, 3), dtype=np.uint8)).convert(mode)
        for _ in range(n)
    ]


def smooth_images(n: int, w: int, h: int, seed: int) -> list:
    """n photo-like images: a random 4×4 colour field upsampled (bilinear). They compress like
    photographs; uniform noise makes PNGs and JPEGs several times larger and slower to write and
    decode than the hub's files."""
    from PIL import Image

    rs = np.random.RandomState(seed)
    return [
        Image.fromarray(rs.randint(0, 256, size=(4, 4, 3), dtype=np.uint8)).resize(
            (w, h), Image.BILINEAR
        )
        for _ in range(n)
    ]


def jpeg_cells(images: list, quality: int = 90) -> list[dict]:
    """Image cells as the hub stores JPEG datasets: encoded bytes, no local path."""
    out = []
    for img in images:
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=quality)
        out.append({"bytes": buf.getvalue(), "path": None})
    return out


def save(root: Path, name: str, features: dict, splits: dict[str, dict[str, list]]) -> Path:
    """``splits`` written as ``DatasetDict.save_to_disk`` writes a prefetched hub set.

    Each split gets an explicit fingerprint: ``Dataset.from_dict`` would compute one by pickling
    the table with dill, which fails under some pyarrow builds (their ``MonthDayNano`` type is not
    importable by name; seen with pyarrow 26.0.1 from PyPI, datasets 5.2.0, dill 0.4.1). The
    fingerprint names cached transforms only; the loader never reads it."""
    import hashlib

    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable

    feats = datasets.Features(features)
    out = {}
    for split, cols in splits.items():
        table = pa.Table.from_pydict(feats.encode_batch(cols), schema=feats.arrow_schema)
        tag = f"{name}/{split}/{table.num_rows}/{table.nbytes}".encode()
        out[split] = datasets.Dataset(
            InMemoryTable(table),
            info=datasets.DatasetInfo(features=feats),
            split=split,
            fingerprint=hashlib.sha256(tag).hexdigest()[:16],
        )
    datasets.DatasetDict(out).save_to_disk(str(root / name))
    return root / name


@dataclass(frozen=True)
class HubFormat:
    """One hub dataset's stored format: columns, label names, split names and image files."""

    image_column: str
    label_column: str
    names: Callable[[], list[str]]  # the label feature's class names, as the hub serves them
    train_split: str
    test_split: str
    size: tuple[int, int] | None  # (w, h) of every image; None: JPEGs of assorted sizes
    extra_splits: tuple[str, ...] = ()  # stored but never read (mini_imagenet's "test")
    coarse: bool = False  # cifar100's second label column


def _imagenet100_names() -> list[str]:
    from benchmark.data.hub_datasets import imagenet100_names

    return imagenet100_names()


FORMATS: dict[str, HubFormat] = {
    "cifar10": HubFormat("img", "label", lambda: CIFAR10_NAMES, "train", "test", (32, 32)),
    "cifar100": HubFormat(
        "img", "fine_label", lambda: CIFAR100_FINE, "train", "test", (32, 32), coarse=True
    ),
    "tiny_imagenet": HubFormat("image", "label", lambda: wnids(200, 0), "train", "valid", (64, 64)),
    "imagenet100": HubFormat("image", "label", _imagenet100_names, "train", "validation", None),
    "stl10": HubFormat("image", "label", lambda: STL10_NAMES, "train", "test", (96, 96)),
    "mini_imagenet": HubFormat(
        "image", "label", lambda: wnids(100, 1), "train", "validation", None, ("test",)
    ),
}
# the assorted sizes of the JPEG sets' images (w, h): landscape, portrait and square, all larger
# than 224 px on the shorter side like most ImageNet photographs, so the loader resizes every one
JPEG_SIZES = ((320, 240), (240, 320), (256, 256))


def _labels(classes: int, n: int, seed: int) -> np.ndarray:
    """Balanced labels in a seeded random order: every class once n >= classes (the partitioners
    refuse a train split with an empty class)."""
    return np.random.RandomState(seed).permutation(np.arange(n, dtype=np.int64) % classes)


def hub_labels(name: str, n: int, seed: int = 0) -> np.ndarray:
    """The labels :func:`write_hub_dataset` writes for the train split of ``name``, so a caller can
    carve partitions before writing the images."""
    return _labels(len(FORMATS[name].names()), n, seed)


def _encoded(n: int, w: int, h: int, seed: int, fmt: str) -> list[dict]:
    """n smooth images as stored image cells: PNG (the CIFAR-style sets) or JPEG bytes."""
    out = []
    for img in smooth_images(n, w, h, seed):
        buf = io.BytesIO()
        img.save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        out.append({"bytes": buf.getvalue(), "path": None})
    return out


CHUNK = 512  # images one worker encodes at a time (each chunk has its own seed)
PARALLEL_FROM = 4096  # below this many images a pool costs more than it saves


def _image_cells(fmt: HubFormat, n: int, seed: int) -> list[dict]:
    """Row i's stored image: ``fmt.size`` PNGs, or JPEGs at JPEG_SIZES[i % 3]; encoded in worker
    processes for large splits (the same bytes either way: every chunk has its own seed)."""
    sizes = [fmt.size] if fmt.size is not None else list(JPEG_SIZES)
    kind = "PNG" if fmt.size is not None else "JPEG"
    jobs = []  # (size index, count, seed) per chunk, rows of one size in order
    for i, (w, h) in enumerate(sizes):
        count = len(range(i, n, len(sizes)))
        jobs += [
            (i, min(CHUNK, count - lo), seed * 7919 + i * 104729 + lo)
            for lo in range(0, count, CHUNK)
        ]
    args = [(c, sizes[i][0], sizes[i][1], s, kind) for i, c, s in jobs]
    if n >= PARALLEL_FROM and (os.cpu_count() or 1) > 2:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("spawn")  # no state of the caller (CUDA) is inherited
        with ProcessPoolExecutor(min(os.cpu_count() or 1, 16), mp_context=ctx) as pool:
            chunks = list(pool.map(_encoded_star, args))
    else:
        chunks = [_encoded(*a) for a in args]
    groups: list[list[dict]] = [[] for _ in sizes]
    for (i, _, _), cells in zip(jobs, chunks):
        groups[i] += cells
    return [groups[i % len(sizes)][i // len(sizes)] for i in range(n)]


def _encoded_star(args: tuple) -> list[dict]:
    return _encoded(*args)


def _split_columns(fmt: HubFormat, n: int, seed: int) -> dict[str, list]:
    labels = _labels(len(fmt.names()), n, seed).tolist()
    cols: dict[str, list] = {fmt.image_column: _image_cells(fmt, n, seed), fmt.label_column: labels}
    if fmt.coarse:
        cols["coarse_label"] = [y % len(CIFAR100_COARSE) for y in labels]
    return cols


def write_hub_dataset(name: str, root: Path, *, train: int, test: int, seed: int = 0) -> Path:
    """``<root>/<name>``: the hub dataset ``name`` in its stored format with ``train`` and ``test``
    rows of generated images and balanced labels (the folder ``prefetch`` would write)."""
    import datasets

    if name not in FORMATS:
        raise KeyError(f"no hub format for {name!r}; known: {', '.join(sorted(FORMATS))}")
    fmt = FORMATS[name]
    features = {
        fmt.image_column: datasets.Image(),
        fmt.label_column: datasets.ClassLabel(names=fmt.names()),
    }
    if fmt.coarse:
        features["coarse_label"] = datasets.ClassLabel(names=CIFAR100_COARSE)
    splits = {
        fmt.train_split: _split_columns(fmt, train, seed),
        fmt.test_split: _split_columns(fmt, test, seed + 1),
    }
    for i, extra in enumerate(fmt.extra_splits):
        splits[extra] = _split_columns(fmt, max(test // 2, 1), seed + 2 + i)
    return save(Path(root), name, features, splits)


__all__ = [
    "CIFAR10_NAMES",
    "CIFAR100_COARSE",
    "CIFAR100_FINE",
    "FORMATS",
    "STL10_NAMES",
    "HubFormat",
    "hub_labels",
    "jpeg_cells",
    "pil_images",
    "save",
    "smooth_images",
    "wnids",
    "write_hub_dataset",
]
