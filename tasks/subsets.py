"""Class-balanced label subsets (docs/protocols/evaluation.md §2.3): a pure function of (labels,
fraction, subset seed).

Per class, m = ceil(N f / C) images (Orchestra ``utils.py:get_dataset_subset`` formula), taken from
a per-class shuffle drawn with ``np.random.default_rng(subset_seed)`` in ascending class order, then
the union is sorted. The subset depends on nothing but the labels and the seed, so every method (and
every training seed) of a grid fine-tunes on the same images; its digest goes into the record.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np


def per_class_count(num_samples: int, fraction: float, num_classes: int) -> int:
    """m = ceil(N f / C): CIFAR-10 (N = 50,000) 1 % → 50, 10 % → 500; STL-10 (N = 5,000) 10 % → 50.

    Computed with rationals on the decimal value of ``fraction`` so that e.g. 50000 · 0.01 is
    exactly 500.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"label fraction must be in (0, 1], got {fraction}")
    if num_classes < 1:
        raise ValueError("num_classes must be >= 1")
    from fractions import Fraction

    return math.ceil(Fraction(num_samples) * Fraction(str(fraction)) / num_classes)


def class_balanced_subset(
    labels: np.ndarray, fraction: float, seed: int, num_classes: int | None = None
) -> np.ndarray:
    """Sorted int64 indices of a class-balanced subset (all images of a class if it has fewer than
    m)."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError("labels must be one-dimensional")
    num_classes = int(
        num_classes if num_classes is not None else (labels.max() + 1 if labels.size else 0)
    )
    if fraction == 1.0:
        return np.arange(labels.shape[0], dtype=np.int64)
    m = per_class_count(labels.shape[0], fraction, num_classes)
    rng = np.random.default_rng(seed)
    chosen = []
    # ascending class order: the stream's draws are consumed in this order
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)
        chosen.append(rng.permutation(idx)[:m])
    return (
        np.sort(np.concatenate(chosen)).astype(np.int64) if chosen else np.zeros(0, dtype=np.int64)
    )


def subset_digest(indices: np.ndarray) -> str:
    """sha256 of the sorted int64 indices, 16 hex characters (recorded in ``TaskScores.extra``)."""
    arr = np.ascontiguousarray(np.sort(np.asarray(indices, dtype=np.int64)))
    return hashlib.sha256(arr.tobytes()).hexdigest()[:16]


def subset_record(
    labels: np.ndarray, indices: np.ndarray, fraction: float, num_classes: int
) -> dict[str, Any]:
    """What a record keeps of a subset of ``labels``: its digest and size, m per class (None for
    all the labels) and the smallest and largest class count it holds."""
    counts = np.bincount(labels[indices], minlength=num_classes)
    return {
        "subset_digest": subset_digest(indices),
        "subset_size": int(indices.size),
        "per_class": per_class_count(len(labels), fraction, num_classes) if fraction < 1 else None,
        "per_class_min": int(counts.min()),
        "per_class_max": int(counts.max()),
    }
