"""Quantity skew: ``quantity_dirichlet`` and ``quantity_weights`` (docs/protocols/partitioning.md
§3.12).

Label mixes stay IID; only client sizes differ.
- ``quantity_dirichlet``: NIID-Bench ``utils.py:partition_data`` "iid-diff-quantity", bit-faithful.
- ``quantity_weights``: EasyFL ``easyfl/datasets/simulation.py:quantity_hetero``, fixed size
  weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from benchmark.contracts.data_types import Partition
from benchmark.contracts.registries import PARTITIONERS
from benchmark.data.partition import check_labels
from benchmark.data.partitioners._common import (
    finish,
    legacy_rng,
    partition_error,
    require_int,
    require_positive,
)
from benchmark.data.partitioners.modifiers import Modifier, check_modifiers


@PARTITIONERS.register("quantity_dirichlet", aliases=("iid-diff-quantity",))
@dataclass(frozen=True, kw_only=True)
class QuantityDirichlet:
    """perm = rs.permutation(N); q ~ Dir(beta 1_K) redrawn until min_k q_k N >= min_size; split perm
    at int(cumsum(q)_j N). Covers all indices."""

    name: ClassVar[str] = "quantity_dirichlet"
    version: ClassVar[str] = "1"
    generation_order: ClassVar[bool] = False

    beta: float  # Dirichlet concentration over client sizes (NIID-Bench --beta)
    min_size: int = 10
    max_tries: int = 1000  # DEVIATION: the original loops forever; we raise PartitionError
    modifiers: tuple[Modifier, ...] = ()

    def __post_init__(self) -> None:
        require_positive(self.name, "beta", self.beta)
        require_int(self.name, "min_size", self.min_size, minimum=0)
        require_int(self.name, "max_tries", self.max_tries)
        check_modifiers(self.modifiers, generation_order=self.generation_order, owner=self.name)

    def __call__(self, labels: np.ndarray, num_clients: int, seed: int) -> Partition:
        labels, _ = check_labels(labels, num_clients)
        rs = legacy_rng(seed)
        n = labels.size
        perm = rs.permutation(n)
        best = -np.inf
        for tries in range(1, self.max_tries + 1):
            q = rs.dirichlet(np.repeat(self.beta, num_clients))
            q = q / q.sum()
            smallest = float(np.min(q * n))
            best = max(best, smallest)
            if smallest >= self.min_size:
                break
        else:
            raise partition_error(
                self,
                tries=self.max_tries,
                best=f"smallest expected client size {best:.4g} (< {self.min_size})",
                hint="raise beta, lower num_clients or lower min_size",
            )
        cuts = (np.cumsum(q) * n).astype(int)[:-1]
        return finish(self, np.split(perm, cuts), labels, seed, meta={"tries": tries})


@PARTITIONERS.register("quantity_weights", aliases=("quantity_hetero",))
@dataclass(frozen=True, kw_only=True)
class QuantityWeights:
    """perm = rs.permutation(N); client k gets the next floor(N w_k); the j-th leftover from the end
    of perm (j = 1..r) goes to client j mod K. Needs one weight per client. Covers all indices."""

    name: ClassVar[str] = "quantity_weights"
    version: ClassVar[str] = "1"
    generation_order: ClassVar[bool] = False

    weights: tuple[float, ...]  # target size shares, one per client; must sum to 1 within 1e-3
    modifiers: tuple[Modifier, ...] = ()

    def __post_init__(self) -> None:
        w = tuple(self.weights)
        if not w:
            raise ValueError(f"{self.name}: weights must not be empty")
        if any(not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0 for x in w):
            raise ValueError(f"{self.name}: weights must be finite and >= 0, got {w}")
        if abs(math.fsum(w) - 1.0) > 1e-3:  # EasyFL asserts round(sum(weights), 3) == 1
            raise ValueError(
                f"{self.name}: weights must sum to 1 (within 1e-3), got {math.fsum(w)}"
            )
        object.__setattr__(self, "weights", w)
        check_modifiers(self.modifiers, generation_order=self.generation_order, owner=self.name)

    def __call__(self, labels: np.ndarray, num_clients: int, seed: int) -> Partition:
        labels, _ = check_labels(labels, num_clients)
        if len(self.weights) != num_clients:
            raise partition_error(
                self,
                tries=1,
                best=f"{len(self.weights)} weights for {num_clients} clients",
                hint="give one weight per client",
                what="weights do not match num_clients",
            )
        rs = legacy_rng(seed)
        n = labels.size
        perm = rs.permutation(n)
        w = np.asarray(self.weights, dtype=np.float64)
        w = w / w.sum()  # renormalised to sum exactly 1
        sizes = np.floor(n * w).astype(np.int64)
        bounds = np.concatenate(([0], np.cumsum(sizes)))
        pieces: list[list[np.ndarray]] = [
            [perm[bounds[k] : bounds[k + 1]]] for k in range(num_clients)
        ]
        leftover = n - int(bounds[-1])
        # EasyFL: for i in range(-r, 0): split[(-i) % K].append(x[i])
        for j in range(1, leftover + 1):
            pieces[j % num_clients].append(perm[n - j : n - j + 1])
        return finish(
            self, [np.concatenate(p) for p in pieces], labels, seed, meta={"leftover": leftover}
        )
