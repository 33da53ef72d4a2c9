"""Server-side public splits (FLESD's D_pub; FedMAE §5.5): carved from the train split, disjoint
from clients.

A public spec wraps the partitioner call, so the carve is part of the partition and of its digest:

- ``holdout(fraction)``: a class-stratified ``fraction`` of the train split is held out first
  (stream ``(partition_seed, "public")``), and the partitioner splits the remaining indices among
  the K clients.
- ``first_shard``: the partitioner splits the train split into K + 1 shards and shard 0 becomes
  D_pub, the FLESD paper's choice (docs/methods/flesd.md "Data roles": the official code's
  ``user_groups['0']``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from benchmark.contracts.data_types import Partition
from benchmark.contracts.registries import PUBLIC_SPLITS
from benchmark.data.partition import substream


def _remap(part: Partition, keep: np.ndarray, public: np.ndarray, n: int) -> Partition:
    clients = tuple(np.sort(keep[ix]) for ix in part.client_indices)
    used = np.concatenate([*clients, public]) if clients else public
    mask = np.ones(n, dtype=bool)
    mask[used] = False
    domain = None
    if part.domain is not None:
        domain = np.full(n, -1, dtype=np.int8)
        domain[keep] = part.domain
    return replace(
        part,
        client_indices=clients,
        dropped=np.flatnonzero(mask).astype(np.int64),
        domain=domain,
        public_indices=np.sort(public).astype(np.int64),
    )


@PUBLIC_SPLITS.register("holdout")
@dataclass(frozen=True, kw_only=True)
class Holdout:
    version: ClassVar[str] = "1"
    fraction: float = 0.1

    def __post_init__(self) -> None:
        if not 0 < self.fraction < 1:
            raise ValueError(f"holdout fraction must be in (0, 1), got {self.fraction}")

    def apply(self, labels: np.ndarray, num_clients: int, seed: int, partitioner: Any) -> Partition:
        labels = np.asarray(labels, dtype=np.int64)
        rs = substream(seed, "public")
        public = []
        for c in range(int(labels.max()) + 1):
            idx = np.flatnonzero(labels == c)
            take = int(round(len(idx) * self.fraction))
            public.append(idx[rs.permutation(len(idx))[:take]])
        pub = np.sort(np.concatenate(public))
        keep = np.setdiff1d(np.arange(len(labels)), pub)
        part = partitioner(labels[keep], num_clients, seed)
        return _remap(part, keep, pub, len(labels))


@PUBLIC_SPLITS.register("first_shard")
@dataclass(frozen=True, kw_only=True)
class FirstShard:
    version: ClassVar[str] = "1"

    def apply(self, labels: np.ndarray, num_clients: int, seed: int, partitioner: Any) -> Partition:
        part = partitioner(np.asarray(labels, dtype=np.int64), num_clients + 1, seed)
        public = part.client_indices[0]
        rest = replace(part, client_indices=part.client_indices[1:])
        return replace(rest, public_indices=np.sort(public).astype(np.int64))
