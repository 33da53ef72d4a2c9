"""``iid``: uniform random split into near-equal parts (docs/protocols/partitioning.md §3.1).

Source: NIID-Bench ``utils.py:partition_data``, scheme ``homo`` (``np.random.permutation`` then
``np.array_split``); FedMAE's "alpha = 0". With the same seed it is bit-identical to NIID-Bench
``homo``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from benchmark.contracts.data_types import Partition
from benchmark.contracts.registries import PARTITIONERS
from benchmark.data.partition import check_labels
from benchmark.data.partitioners._common import finish, legacy_rng
from benchmark.data.partitioners.modifiers import Modifier, check_modifiers


def iid_lists(n: int, num_clients: int, rs: np.random.RandomState) -> list[np.ndarray]:
    """perm = rs.permutation(n), cut into K consecutive parts: ceil(n/K) for the first n mod K,
    floor(n/K) after."""
    return list(np.array_split(rs.permutation(n), num_clients))


@PARTITIONERS.register("iid", aliases=("homo",))
@dataclass(frozen=True, kw_only=True)
class IID:
    """IID split (§3.1). Covers all indices; fails only when K > N."""

    name: ClassVar[str] = "iid"
    version: ClassVar[str] = "1"
    # DEVIATION: docs/protocols/partitioning.md §3.13 allows decssl_prefix only after the Dec-SSL
    # partitioners, but Dec-SSL's IID cells (cifar_iid) go through the same train_val_test, which
    # keeps the first 80 % of each client's list. A client's list here is a slice of one random
    # permutation, so its generation order is random and the prefix a uniform 80 % subset, as in the
    # official code (the review's finding: native_decssl's IID cells trained on all).
    generation_order: ClassVar[bool] = True

    modifiers: tuple[Modifier, ...] = ()  # §3.13; see modifiers.py

    def __post_init__(self) -> None:
        check_modifiers(self.modifiers, generation_order=self.generation_order, owner=self.name)

    def __call__(self, labels: np.ndarray, num_clients: int, seed: int) -> Partition:
        labels, _ = check_labels(labels, num_clients)
        rs = legacy_rng(seed)
        return finish(self, iid_lists(labels.size, num_clients, rs), labels, seed, meta={})
