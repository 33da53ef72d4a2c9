"""``orchestra_sinkhorn``: Orchestra's balanced Dirichlet sampler (docs/protocols/partitioning.md
§3.3).

Source: Lubana et al., "Orchestra: Unsupervised Federated Learning via Globally Consistent
Clustering" (ICML 2022), ``sampler.py`` with ``use_balance=True``; the paper cites Hsu et al. 2019.
Bit-faithful: the original seeds the global RNG with 0 and makes one Dirichlet call, so ``seed = 0``
reproduces the official partitions.
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


def sinkhorn_client_mix(
    rs: np.random.RandomState, num_clients: int, num_classes: int, alpha: float, balance_iters: int
) -> np.ndarray:
    """The K x C matrix D of §3.3 steps 1-3 (Dirichlet draw, total normalisation, alternating
    balancing).

    Both sums of an iteration are taken from the same D before dividing, as in the original.
    """
    dist = rs.dirichlet(np.repeat(alpha, num_clients), size=num_classes).transpose()
    dist /= dist.sum()
    for _ in range(balance_iters):
        col = dist.sum(axis=0, keepdims=True)
        row = dist.sum(axis=1, keepdims=True)
        dist /= col
        dist /= row
    return dist


@PARTITIONERS.register("orchestra_sinkhorn")
@dataclass(frozen=True, kw_only=True)
class OrchestraSinkhorn:
    """Orchestra balanced sampler (§3.3): near-equal client sizes, skewed label mixes.

    Client k receives the contiguous slice of I_c (dataset order) after the slices of clients
    0..k-1, of size floor(D_kc * C * n_c). Floor remainders (< K C samples) are dropped.
    """

    name: ClassVar[str] = "orchestra_sinkhorn"
    version: ClassVar[str] = "1"
    generation_order: ClassVar[bool] = False

    # "moderate" heterogeneity, Orchestra's default setting (Table 4); 1e5 = IID, 1e-3 = "high"
    alpha: float = 0.1
    balance_iters: int = 100  # iterations of the balancing loop (use_balance=True); 0 disables it
    modifiers: tuple[Modifier, ...] = ()

    def __post_init__(self) -> None:
        require_positive(self.name, "alpha", self.alpha)
        require_int(self.name, "balance_iters", self.balance_iters, minimum=0)
        check_modifiers(self.modifiers, generation_order=self.generation_order, owner=self.name)

    def __call__(self, labels: np.ndarray, num_clients: int, seed: int) -> Partition:
        labels, num_classes = check_labels(labels, num_clients)
        rs = legacy_rng(seed)
        with np.errstate(divide="ignore", invalid="ignore"):
            dist = sinkhorn_client_mix(rs, num_clients, num_classes, self.alpha, self.balance_iters)
        if not np.all(np.isfinite(dist)):
            raise partition_error(
                self,
                tries=1,
                best="D has non-finite entries (Dirichlet weights underflowed to 0)",
                hint="raise alpha or lower num_clients",
                what="non-finite client mix",
            )
        per_class = class_indices(labels, num_classes)
        n_c = np.array([len(ix) for ix in per_class], dtype=np.int64)
        # DEVIATION: the original uses floor(D * N_train); C * n_c equals N_train for class-balanced
        # data (same floats, same counts) and keeps unbalanced datasets inside their class counts.
        counts = np.floor(dist * (num_classes * n_c)[None, :]).astype(np.int64)
        allocated = counts.sum(axis=0)
        if np.any(allocated > n_c):
            c = int(np.argmax(allocated - n_c))
            # DEVIATION: the original silently shortens the last slices of an over-allocated class.
            raise partition_error(
                self,
                tries=1,
                best=f"class {c} allocated {int(allocated[c])} of {int(n_c[c])} samples",
                hint="raise balance_iters or alpha",
                what="over-allocated class",
            )
        starts = np.vstack([np.zeros((1, num_classes), np.int64), np.cumsum(counts, axis=0)])
        lists = [
            np.concatenate(
                [per_class[c][starts[k, c] : starts[k + 1, c]] for c in range(num_classes)]
            )
            for k in range(num_clients)
        ]
        return finish(self, lists, labels, seed, meta={})
