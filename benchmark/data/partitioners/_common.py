"""Helpers shared by the partitioner modules (docs/protocols/partitioning.md §1): validation, RNG,
spec, errors, finishing.

Every partitioner is a frozen dataclass whose ``__call__`` draws generation-order client lists and
hands them to :func:`finish`, which applies the modifiers (§3.13), sorts, computes ``dropped`` and
fills ``spec``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmark.contracts.data_types import Partition
from benchmark.core.config import to_plain
from benchmark.data.partition import PartitionError, finalize, labels_sha256
from benchmark.data.partitioners.modifiers import apply_modifiers


def legacy_rng(seed: int) -> np.random.RandomState:
    """``np.random.RandomState(seed)`` (§1.4), after checking that ``seed`` is an integer in [0,
    2**32)."""
    if (
        isinstance(seed, bool)
        or not isinstance(seed, (int, np.integer))
        or not 0 <= int(seed) < 2**32
    ):
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}")
    return np.random.RandomState(int(seed))


def class_indices(labels: np.ndarray, num_classes: int) -> list[np.ndarray]:
    """I_c for c = 0..C-1: the indices of class c in ascending order (= ``np.where(labels ==
    c)[0]``)."""
    order = np.argsort(labels, kind="stable")
    bounds = np.cumsum(np.bincount(labels, minlength=num_classes))[:-1]
    return [np.asarray(part, dtype=np.int64) for part in np.split(order, bounds)]


def require_positive(owner: str, field: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{owner}: {field} must be a finite number > 0, got {value!r}")


def require_unit(owner: str, field: str, value: float, *, open_low: bool = False) -> None:
    """value in [0, 1] (or (0, 1] with ``open_low``)."""
    ok = isinstance(value, (int, float)) and (0 < value <= 1 if open_low else 0 <= value <= 1)
    if not ok:
        raise ValueError(
            f"{owner}: {field} must be in {'(0, 1]' if open_low else '[0, 1]'}, got {value!r}"
        )


def require_int(owner: str, field: str, value: int, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{owner}: {field} must be an integer >= {minimum}, got {value!r}")


def params_of(owner: Any) -> dict[str, Any]:
    """The partitioner's parameters as plain JSON values (dataclass fields; ClassVars excluded)."""
    return to_plain(owner)


def make_spec(owner: Any, labels: np.ndarray, seed: int) -> dict[str, Any]:
    """``Partition.spec`` (§1.3): name, version, params, seed, labels sha256."""
    return {
        "name": owner.name,
        "version": owner.version,
        "params": params_of(owner),
        "seed": int(seed),
        "labels_sha256": labels_sha256(labels),
    }


def partition_error(
    owner: Any, *, tries: int, best: str, hint: str, what: str = "constraint not met"
) -> PartitionError:
    """The §1.7 failure message: name, parameters, tries, best constraint value reached, and a
    hint."""
    return PartitionError(
        f"{owner.name}: {what} after {tries} tr{'y' if tries == 1 else 'ies'} "
        f"(params {params_of(owner)}); best reached: {best}. Hint: {hint}"
    )


def finish(
    owner: Any,
    lists: Sequence[np.ndarray],
    labels: np.ndarray,
    seed: int,
    *,
    meta: dict[str, Any],
    domain: np.ndarray | None = None,
) -> Partition:
    """Apply ``owner.modifiers`` to the generation-order lists, then sort, complement and fill
    ``spec``."""
    lists = [np.asarray(ix, dtype=np.int64) for ix in lists]
    modifiers = getattr(owner, "modifiers", ())
    meta = {"tries": 1, "constraint_violated": False, **meta}
    if modifiers:
        before = sum(len(ix) for ix in lists)
        lists = apply_modifiers(lists, modifiers, seed)
        meta["modifier_dropped"] = int(before - sum(len(ix) for ix in lists))
    if domain is not None:
        domain = np.asarray(domain, dtype=np.int8)
    return finalize(
        lists, int(labels.size), spec=make_spec(owner, labels, seed), meta=meta, domain=domain
    )
