"""Partition modifiers (docs/protocols/partitioning.md §3.13): ``decssl_prefix`` and ``subsample``.

A modifier is not a partitioner: it post-processes the client lists of a base partitioner, after the
draw and before sorting and hashing. Modifiers are expressed in a grid as the ``modifiers`` field
that every partitioner config carries, applied in the listed order::

    partition: {name: decssl_band, alpha: 0.1, modifiers: [{name: decssl_prefix, fraction: 0.8}]}
    partition: {name: niid_bench_labeldir, alpha: 0.5, modifiers: [{name: subsample, fraction: 0.1}]}

This keeps the base algorithm's name as the partition name (names carry the algorithm, §0), puts the
modifier into ``spec.params`` (so it changes the cell id), and lets the digest reflect it. Indices
removed by a modifier go to ``Partition.dropped``.

- ``decssl_prefix(f)``: keep the first ``int(f * n_k)`` indices of each client's generation-order
  list (Dec-SSL ``src/update.py:train_val_test`` trains on ``idxs[:int(0.8 * len(idxs))]``). Only
  partitioners that define a generation order (``generation_order = True``: the ``decssl_*`` family)
  accept it, and it must come first, because ``subsample`` does not keep the generation order.
- ``subsample(f)``: keep ``ceil(f * n_k)`` indices of a permutation of each client's sorted list,
  drawn from the sub-stream ``(seed, "subsample")`` (Dec-SSL B.7; the percentage is of the client
  shard, see §3.13).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from benchmark.data.partition import substream

MODIFIER_NAMES = ("decssl_prefix", "subsample")


@dataclass(frozen=True, kw_only=True)
class Modifier:
    """One post-processing step of a partition (§3.13). ``fraction`` f is in (0, 1]."""

    name: Literal["decssl_prefix", "subsample"]
    fraction: float

    def __post_init__(self) -> None:
        if self.name not in MODIFIER_NAMES:
            raise ValueError(
                f"unknown partition modifier {self.name!r}; known: {', '.join(MODIFIER_NAMES)}"
            )
        if not (0.0 < float(self.fraction) <= 1.0):
            raise ValueError(
                f"modifier {self.name}: fraction must be in (0, 1], got {self.fraction!r}"
            )


def check_modifiers(modifiers: Sequence[Modifier], *, generation_order: bool, owner: str) -> None:
    """Validate a modifier list for partitioner ``owner`` (raises ``ValueError``)."""
    seen: set[str] = set()
    for pos, mod in enumerate(modifiers):
        if not isinstance(mod, Modifier):
            raise ValueError(f"{owner}: modifiers must be Modifier objects, got {mod!r}")
        if mod.name in seen:
            raise ValueError(f"{owner}: modifier {mod.name!r} given twice")
        seen.add(mod.name)
        if mod.name == "decssl_prefix":
            if not generation_order:
                raise ValueError(
                    f"{owner}: decssl_prefix needs a client generation order, which only the Dec-SSL "
                    "partitioners (decssl_*) define (docs/protocols/partitioning.md §3.13)"
                )
            if pos != 0:
                raise ValueError(
                    f"{owner}: decssl_prefix must be the first modifier (subsample loses the order)"
                )


def prefix_count(fraction: float, n: int) -> int:
    """int(f * n), truncating as Dec-SSL's ``int(0.8 * len(idxs))`` does."""
    return int(fraction * n)


def subsample_count(fraction: float, n: int) -> int:
    """ceil(f * n). The product is rounded to 9 decimals first, so that 0.1 * 30 (=
    3.0000000000000004 in binary floating point) keeps 3, the intended decimal value, not 4."""
    return min(n, math.ceil(round(fraction * n, 9)))


def decssl_prefix(lists: Sequence[np.ndarray], fraction: float) -> list[np.ndarray]:
    """Keep the head ``int(f n_k)`` of each generation-order list (§3.13)."""
    return [np.asarray(ix)[: prefix_count(fraction, len(ix))] for ix in lists]


def subsample(lists: Sequence[np.ndarray], fraction: float, seed: int) -> list[np.ndarray]:
    """Keep ``ceil(f n_k)`` indices of a permutation of each client's sorted list; clients in order,
    one stream."""
    rs = substream(seed, "subsample")
    out = []
    for ix in lists:
        ix = np.sort(np.asarray(ix, dtype=np.int64))
        out.append(ix[rs.permutation(len(ix))[: subsample_count(fraction, len(ix))]])
    return out


def apply_modifiers(
    lists: Sequence[np.ndarray], modifiers: Sequence[Modifier], seed: int
) -> list[np.ndarray]:
    """Apply ``modifiers`` in order (pure; the input lists are not changed)."""
    out = [np.asarray(ix, dtype=np.int64) for ix in lists]
    for mod in modifiers:
        if mod.name == "decssl_prefix":
            out = decssl_prefix(out, mod.fraction)
        else:
            out = subsample(out, mod.fraction, seed)
    return out
