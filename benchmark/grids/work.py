"""The work a grid's cells do, torch-free: each dataset's train-split size, classes and image size,
and a cell's client work (client images, client updates, images per update) from its own partition
carved from the train split's size. ``plan``, the cost model (``benchmark.grids.cost``) and the
calibrated projection (``benchmark.calibration.projection``) all count from here."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

TRAIN_SIZES = {
    "digits": 1438,
    "cifar10": 50000,
    "cifar100": 50000,
    "stl10": 105000,
    "tiny_imagenet": 100000,
    "imagenet100": 126689,
    # the hub's train split (its validation split of 10,000 is the test split; hub_datasets.py)
    "mini_imagenet": 50000,
}
# label classes of each train split (the cost projection carves partitions from balanced labels)
NUM_CLASSES = {
    "digits": 10,
    "cifar10": 10,
    "cifar100": 100,
    "stl10": 10,
    "tiny_imagenet": 200,
    "imagenet100": 100,
    "mini_imagenet": 100,
}
IMAGE_SIZES = {
    "cifar10": 32,
    "cifar100": 32,
    "stl10": 96,
    "tiny_imagenet": 64,
    "imagenet100": 224,
    "mini_imagenet": 224,
}


def image_size(cell: Cell) -> int:
    """The side of the cell's training images: the dataset's ``size`` parameter, else its native
    size."""
    return int(cell.dataset.params.get("size", IMAGE_SIZES.get(cell.dataset.name, 16)))


def train_images(cell: Cell) -> int:
    """Images in the train split the clients partition (the validation carve taken out)."""
    from benchmark.contracts.registries import DATASETS
    from benchmark.core.config import from_mapping

    n = TRAIN_SIZES.get(cell.dataset.name, 50000)
    cfg = from_mapping(DATASETS.get(cell.dataset.name), dict(cell.dataset.params))
    if getattr(cfg, "eval_split", "test") == "validation":
        n -= int(round(n * float(getattr(cfg, "val_fraction", 0.2))))
    return n


@lru_cache(maxsize=4096)
def _client_sizes(
    dataset: str, n: int, partition_json: str, public_json: str, k: int, seed: int
) -> tuple[int, ...]:
    import numpy as np

    from benchmark.contracts.cell import Cell
    from benchmark.data.partition import cell_partition

    raw = {"partition": json.loads(partition_json), "public": json.loads(public_json)}
    fake = Cell.from_dict(
        {
            **raw,
            **{k2: {"name": "-", "version": "-"} for k2 in ("dataset", "backbone", "method")},
            "partition_seed": seed,
            "fl": {"num_clients": k},
            "seed": 0,
            "tasks": [],
        }
    )
    labels = np.arange(n, dtype=np.int64) % NUM_CLASSES.get(dataset, 10)  # balanced
    return tuple(int(s) for s in cell_partition(fake, labels).sizes())


def client_sizes(cell: Cell) -> tuple[int, ...]:
    """The cell's client sizes, carved from its train split's size with balanced labels."""
    plain = cell.to_dict()
    return _client_sizes(
        cell.dataset.name,
        train_images(cell),
        json.dumps(plain["partition"], sort_keys=True),
        json.dumps(plain.get("public"), sort_keys=True),
        cell.fl.num_clients,
        cell.partition_seed,
    )


def client_work(cell: Cell) -> tuple[float, float, float]:
    """(client images, client updates, mean images per update) of the whole pre-training; zeros for
    a method that trains nothing."""
    from benchmark.contracts.registries import METHODS

    cls = METHODS.get(cell.method.name)
    if not cls.pretrains:
        return 0.0, 0.0, 0.0
    sizes = client_sizes(cell)
    if cls.federation == "pooled":  # one client holding every client's data
        per_update, per_round = float(sum(sizes)), 1
    else:
        per_update, per_round = sum(sizes) / len(sizes), cell.fl.clients_per_round
    updates = cell.fl.rounds * per_round
    return updates * cell.fl.local_epochs * per_update, float(updates), per_update


__all__ = [
    "IMAGE_SIZES",
    "NUM_CLASSES",
    "TRAIN_SIZES",
    "client_sizes",
    "client_work",
    "image_size",
    "train_images",
]
