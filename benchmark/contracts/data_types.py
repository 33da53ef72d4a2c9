"""The data a task sees: a dataset's splits and a partition (torch-free at import)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, eq=False)
class DatasetSplit:
    images: torch.Tensor  # (N, 3, H, W) uint8, CPU
    labels: np.ndarray  # (N,) int64
    num_classes: int

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, indices: np.ndarray) -> DatasetSplit:
        import torch

        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        return DatasetSplit(
            self.images[idx], self.labels[np.asarray(indices, dtype=np.int64)], self.num_classes
        )


@dataclass(frozen=True, eq=False)
class DatasetSplits:
    name: str
    train: DatasetSplit
    test: DatasetSplit
    revision: str  # content digest of both splits (or the hub revision)
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def num_classes(self) -> int:
        return self.train.num_classes

    @property
    def image_size(self) -> int:
        return int(self.train.images.shape[-1])


@dataclass(frozen=True, eq=False)
class Partition:
    """Client index sets into the train split. Compare ``digest()``, not the arrays."""

    client_indices: tuple[np.ndarray, ...]  # K sorted, unique int64 arrays; disjoint
    # assigned to no client
    dropped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    domain: np.ndarray | None = None  # int8 group id per train index (covariate shift), or None
    # server-side public split (FLESD D_pub), disjoint from clients
    public_indices: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # tries, constraint_violated, diagnostics
    spec: dict[str, Any] = field(default_factory=dict)  # name, params, seed, labels_sha256

    @property
    def num_clients(self) -> int:
        return len(self.client_indices)

    def sizes(self) -> np.ndarray:
        return np.array([len(ix) for ix in self.client_indices], dtype=np.int64)

    def digest(self) -> str:
        """sha256 per docs/protocols/partitioning.md §5 (plus a ``public`` block when a public split
        was carved)."""
        h = hashlib.sha256(b"fssl-partition-v1\n")
        h.update(np.uint64(len(self.client_indices)).astype("<u8").tobytes())
        for ix in self.client_indices:
            h.update(np.uint64(len(ix)).astype("<u8").tobytes())
            h.update(np.asarray(ix, dtype="<i8").tobytes())
        if self.domain is not None:
            h.update(b"domain\n")
            h.update(np.asarray(self.domain, dtype=np.int8).tobytes())
        if self.public_indices is not None:
            h.update(b"public\n")
            h.update(np.asarray(self.public_indices, dtype="<i8").tobytes())
        return h.hexdigest()

    def label_counts(self, labels: np.ndarray, num_classes: int) -> np.ndarray:
        """(clients, classes) matrix N_kc."""
        labels = np.asarray(labels)
        return np.stack(
            [
                np.bincount(labels[ix], minlength=num_classes)
                if len(ix)
                else np.zeros(num_classes, np.int64)
                for ix in self.client_indices
            ]
        ).astype(np.int64)
