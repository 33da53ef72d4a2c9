"""``easyfl_class``: EasyFL's class partition (docs/protocols/partitioning.md §3.8).

Source: EasyFL (Zhuang et al.), ``easyfl/datasets/simulation.py:non_iid_class``, the partition of
the FedU and FedEMA code (``--data_partition class``; 2 classes per client on CIFAR-10, 20 on
CIFAR-100).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from benchmark.contracts.data_types import Partition
from benchmark.contracts.registries import PARTITIONERS
from benchmark.data.partition import check_labels
from benchmark.data.partitioners._common import (
    class_indices,
    finish,
    legacy_rng,
    partition_error,
    require_int,
)
from benchmark.data.partitioners.modifiers import Modifier, check_modifiers


def equal_parts(idx: np.ndarray, parts: int) -> list[np.ndarray]:
    """EasyFL ``equal_division`` sizes: the first P - r parts floor(n / P), the last r parts floor(n
    / P) + 1."""
    n = len(idx)
    base, r = divmod(n, parts)
    sizes = [base] * (parts - r) + [base + 1] * r
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    return [idx[bounds[j] : bounds[j + 1]] for j in range(parts)]


@PARTITIONERS.register("easyfl_class", aliases=("class",))
@dataclass(frozen=True, kw_only=True)
class EasyFLClass:
    """Each class is shuffled and cut into P = ceil(k K / C) parts; clients in order take k parts
    each from the least-used class (min-heap on (times used, class)). Class assignment is
    deterministic; only the within-class split is random. Unused parts are dropped. CIFAR-10, K = 5,
    k = 2: client j holds classes {2j, 2j+1}."""

    name: ClassVar[str] = "easyfl_class"
    version: ClassVar[str] = "1"
    generation_order: ClassVar[bool] = False

    classes_per_client: int = 2  # k (EasyFL class_per_client)
    # The heap hands out classes round-robin, so a client receives a class twice exactly when k > C.
    # DEVIATION: the original then repeats silently; we raise unless allow_repeat is true.
    allow_repeat: bool = False
    modifiers: tuple[Modifier, ...] = ()

    def __post_init__(self) -> None:
        require_int(self.name, "classes_per_client", self.classes_per_client)
        if not isinstance(self.allow_repeat, bool):
            raise ValueError(f"{self.name}: allow_repeat must be true or false")
        check_modifiers(self.modifiers, generation_order=self.generation_order, owner=self.name)

    def __call__(self, labels: np.ndarray, num_clients: int, seed: int) -> Partition:
        labels, num_classes = check_labels(labels, num_clients)
        k = self.classes_per_client
        if k > num_classes and not self.allow_repeat:
            raise partition_error(
                self,
                tries=1,
                best=f"classes_per_client {k} > C = {num_classes}: every client would repeat a class",
                hint="lower classes_per_client, or set allow_repeat: true to reproduce EasyFL",
                what="repeated class",
            )
        rs = legacy_rng(seed)
        n_parts = math.ceil(k * num_clients / num_classes)
        parts: list[list[np.ndarray]] = []
        for members in class_indices(labels, num_classes):
            idx = members.copy()
            rs.shuffle(idx)
            parts.append(equal_parts(idx, n_parts))
        heap = [(0, c) for c in range(num_classes)]
        heapq.heapify(heap)
        used = [0] * num_classes
        lists = []
        repeats = 0
        for client in range(num_clients):
            held: list[int] = []
            pieces = []
            for _ in range(k):
                times, c = heapq.heappop(heap)
                if used[c] >= n_parts:
                    # DEVIATION: the original fails with an IndexError (pop from an empty list).
                    raise partition_error(
                        self,
                        tries=1,
                        best=f"class {c} has no unused part for client {client}",
                        hint="choose num_clients * classes_per_client <= parts * C",
                        what="exhausted class parts",
                    )
                if c in held:
                    repeats += 1
                    if not self.allow_repeat:
                        raise partition_error(
                            self,
                            tries=1,
                            best=f"client {client} would receive class {c} twice",
                            hint="make num_clients * classes_per_client a multiple of C, or set allow_repeat: true",
                            what="repeated class",
                        )
                held.append(c)
                pieces.append(parts[c][used[c]])
                used[c] += 1
                heapq.heappush(heap, (times + 1, c))
            lists.append(np.concatenate(pieces))
        return finish(
            self,
            lists,
            labels,
            seed,
            meta={"parts_per_class": n_parts, "repeated_classes": repeats},
        )
