"""``flesd_minshare``: FLESD's Dirichlet split with a floor on each client's share
(docs/protocols/partitioning.md §3.5).

Source: Shi et al., "Federated Self-Supervised Contrastive Learning via Ensemble Similarity
Distillation" (FLESD), code ``sampling.py:generate_noniid_inds`` (the paper cites Lin et al. 2020).
FLESD stored its partitions in a JSON file that is not released, so its exact shards cannot be
recovered; this is the algorithm.
"""

from __future__ import annotations

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
    require_positive,
)
from benchmark.data.partitioners.modifiers import Modifier, check_modifiers


@PARTITIONERS.register("flesd_minshare")
@dataclass(frozen=True, kw_only=True)
class FLESDMinShare:
    """FLESD ``generate_noniid_inds`` (§3.5): d ~ Dir(alpha 1_K) per class (K x C), redrawn until
    min_k sum_c d_kc > min_prop / K; client k takes the next int(n_c d_kc) of each shuffled class
    list.

    Floor remainders (< K C samples) are dropped. FLESD's use of client 0 as the public set is a
    method setting.
    """

    name: ClassVar[str] = "flesd_minshare"
    version: ClassVar[str] = "1"
    generation_order: ClassVar[bool] = False

    alpha: float  # FLESD grid {100, 1, 0.01}
    min_prop: float = 0.5  # floor on a client's summed share, relative to 1/K
    # DEVIATION: the original redraws forever (while True); we raise PartitionError
    max_tries: int = 1000
    modifiers: tuple[Modifier, ...] = ()

    def __post_init__(self) -> None:
        require_positive(self.name, "alpha", self.alpha)
        if not (isinstance(self.min_prop, (int, float)) and 0 <= self.min_prop < 1):
            raise ValueError(f"{self.name}: min_prop must be in [0, 1), got {self.min_prop!r}")
        require_int(self.name, "max_tries", self.max_tries)
        check_modifiers(self.modifiers, generation_order=self.generation_order, owner=self.name)

    def __call__(self, labels: np.ndarray, num_clients: int, seed: int) -> Partition:
        labels, num_classes = check_labels(labels, num_clients)
        rs = legacy_rng(seed)
        # DEVIATION: the original sorts with the default (unstable) argsort; a stable sort gives I_c
        # ascending.
        per_class = [ix.copy() for ix in class_indices(labels, num_classes)]
        floor = self.min_prop / num_clients
        best = -np.inf
        for tries in range(1, self.max_tries + 1):
            # K x C, columns sum to 1
            mix = rs.dirichlet(np.repeat(self.alpha, num_clients), num_classes).T
            share = float(mix.sum(axis=1).min())
            best = max(best, share)
            if share > floor:
                break
        else:
            raise partition_error(
                self,
                tries=self.max_tries,
                best=f"smallest client share {best:.4g} (needs > {floor:.4g})",
                hint="raise alpha, lower num_clients or lower min_prop",
            )
        for members in per_class:
            rs.shuffle(members)
        n_c = np.array([len(ix) for ix in per_class], dtype=np.int64)
        taken = np.zeros(num_classes, dtype=np.int64)
        lists = []
        for k in range(num_clients):
            counts = (n_c * mix[k]).astype(int)
            parts = []
            for c in range(num_classes):
                parts.append(per_class[c][taken[c] : taken[c] + counts[c]])
                taken[c] = min(taken[c] + counts[c], n_c[c])
            lists.append(np.concatenate(parts))
        return finish(self, lists, labels, seed, meta={"tries": tries, "min_share": share})
