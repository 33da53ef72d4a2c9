"""Label-Dirichlet partitioners: ``niid_bench_labeldir`` (§3.2) and ``dirichlet_plain`` (§3.6).

``niid_bench_labeldir`` is the loop of NIID-Bench ``utils.py:partition_data`` ("noniid-labeldir"),
also found in EasyFL ``non_iid_dirichlet``, FedML, FedLab ``hetero_dir_partition`` and SSL-FL: per
class, a Dirichlet draw over the clients, with clients that already hold N/K samples excluded (the
"balance" cap); the whole draw is redone until every client has ``min_size`` samples.
:func:`label_dirichlet_draw` is one such draw; ``decssl_band`` (decssl.py) reuses it with a
different acceptance rule.
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


@dataclass(frozen=True, eq=False)
class LabelDirDraw:
    """One draw of §3.2 step 1.1-1.2: per class, the shuffled I_c and its K+1 slice bounds."""

    shuffled: tuple[np.ndarray, ...]
    bounds: tuple[np.ndarray, ...]  # bounds[c][k]:bounds[c][k+1] is client k's piece of shuffled[c]
    sizes: np.ndarray  # |B_k|
    # a class found every uncapped client with zero weight (0/0); the draw is unusable
    degenerate: bool

    def client_lists(self) -> list[np.ndarray]:
        """B_k in generation order: class-ascending blocks, each a piece of the shuffled I_c."""
        k_count = len(self.sizes)
        return [
            np.concatenate(
                [s[b[k] : b[k + 1]] for s, b in zip(self.shuffled, self.bounds)]
                or [np.zeros(0, np.int64)]
            )
            for k in range(k_count)
        ]


def label_dirichlet_draw(
    rs: np.random.RandomState,
    per_class: list[np.ndarray],
    num_clients: int,
    alpha: float,
    n_total: int,
) -> LabelDirDraw:
    """One label-Dirichlet draw with the N/K balance cap, in the original RNG order (§3.2 step
    1.1-1.2).

    Per class c: shuffle a fresh copy of I_c, draw p ~ Dir(alpha 1_K), zero p_k for every client
    with
    |B_k| >= N/K, renormalise, and cut at ``(cumsum(p) * n_c).astype(int)[:-1]`` (``np.split`` semantics).
    """
    cap = n_total / num_clients
    sizes = np.zeros(num_clients, dtype=np.int64)
    shuffled: list[np.ndarray] = []
    bounds: list[np.ndarray] = []
    degenerate = False
    for members in per_class:
        idx = members.copy()
        rs.shuffle(idx)
        p = rs.dirichlet(np.repeat(alpha, num_clients))
        # the original multiplies by the bool (len(B_k) < N / K) client by client
        p = p * (sizes < cap)
        total = p.sum()
        n_c = len(idx)
        if not (np.isfinite(total) and total > 0):
            # DEVIATION: the original divides 0 by 0 here (possible only when Dirichlet weights
            # underflow to exactly 0 at tiny alpha) and continues with NaN cut points; we keep
            # drawing (same RNG use as the original) but reject the whole draw.
            degenerate = True
            shuffled.append(idx)
            bounds.append(np.concatenate(([0], np.full(num_clients, n_c))).astype(np.int64))
            continue
        p = p / total
        cuts = (np.cumsum(p) * n_c).astype(int)[:-1]
        b = np.clip(np.concatenate(([0], cuts, [n_c])), 0, n_c).astype(np.int64)
        b = np.maximum.accumulate(b)  # np.split gives empty pieces for decreasing cut points
        sizes = sizes + np.diff(b)
        shuffled.append(idx)
        bounds.append(b)
    return LabelDirDraw(tuple(shuffled), tuple(bounds), sizes, degenerate)


@PARTITIONERS.register("niid_bench_labeldir", aliases=("dirichlet", "noniid-labeldir", "labeldir"))
@dataclass(frozen=True, kw_only=True)
class NIIDBenchLabelDir:
    """NIID-Bench "noniid-labeldir" (Li et al., ICDE 2022, ``utils.py:partition_data``),
    bit-faithful (§3.2).

    Covers all indices. Raises ``PartitionError`` after ``max_tries`` draws with some client below
    ``min_size``.
    """

    name: ClassVar[str] = "niid_bench_labeldir"
    version: ClassVar[str] = "1"
    generation_order: ClassVar[bool] = False

    alpha: float  # Dirichlet concentration (NIID-Bench's --beta)
    min_size: int = 10  # min_require_size in NIID-Bench
    max_tries: int = 1000  # DEVIATION: the original loops forever; we raise PartitionError
    modifiers: tuple[Modifier, ...] = ()

    def __post_init__(self) -> None:
        require_positive(self.name, "alpha", self.alpha)
        require_int(self.name, "min_size", self.min_size, minimum=0)
        require_int(self.name, "max_tries", self.max_tries)
        check_modifiers(self.modifiers, generation_order=self.generation_order, owner=self.name)

    def __call__(self, labels: np.ndarray, num_clients: int, seed: int) -> Partition:
        labels, num_classes = check_labels(labels, num_clients)
        rs = legacy_rng(seed)
        per_class = class_indices(labels, num_classes)
        best = -1
        for tries in range(1, self.max_tries + 1):
            draw = label_dirichlet_draw(rs, per_class, num_clients, self.alpha, labels.size)
            smallest = -1 if draw.degenerate else int(draw.sizes.min())
            best = max(best, smallest)
            if not draw.degenerate and smallest >= self.min_size:
                lists = draw.client_lists()
                # RNG parity with the original's final np.random.shuffle(idx_batch[j])
                for ix in lists:
                    rs.shuffle(ix)
                return finish(
                    self, lists, labels, seed, meta={"tries": tries, "min_size_reached": smallest}
                )
        raise partition_error(
            self,
            tries=self.max_tries,
            best=f"smallest client size {best} (< min_size {self.min_size})",
            hint="raise alpha, lower num_clients or lower min_size",
        )


@PARTITIONERS.register("dirichlet_plain")
@dataclass(frozen=True, kw_only=True)
class DirichletPlain:
    """Plain label Dirichlet without cap or retry: FedU2 ``splitting.py:split_dirichlet_label``
    (§3.6).

    P ~ Dir(alpha 1_K) per class (C x K, one call); per class, shuffle I_c, give client k floor(n_c
    P_ck) and the leftovers to the largest fractional parts. Covers all indices; empty clients are
    allowed and counted. With ``min_size > 0`` an undersized result raises (no retry, so the draw
    stays equal to the original's).
    """

    name: ClassVar[str] = "dirichlet_plain"
    version: ClassVar[str] = "1"
    generation_order: ClassVar[bool] = False

    alpha: float
    min_size: int = 0
    modifiers: tuple[Modifier, ...] = ()

    def __post_init__(self) -> None:
        require_positive(self.name, "alpha", self.alpha)
        require_int(self.name, "min_size", self.min_size, minimum=0)
        check_modifiers(self.modifiers, generation_order=self.generation_order, owner=self.name)

    def __call__(self, labels: np.ndarray, num_clients: int, seed: int) -> Partition:
        labels, num_classes = check_labels(labels, num_clients)
        rs = legacy_rng(seed)
        prior = rs.dirichlet(np.repeat(self.alpha, num_clients), size=num_classes)  # C x K
        pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c, members in enumerate(class_indices(labels, num_classes)):
            idx = members.copy()
            rs.shuffle(idx)
            counts = largest_remainder(len(idx), prior[c])
            bounds = np.concatenate(([0], np.cumsum(counts)))
            for k in range(num_clients):
                pieces[k].append(idx[bounds[k] : bounds[k + 1]])
        lists = [np.concatenate(p) for p in pieces]
        smallest = min(len(ix) for ix in lists)
        if smallest < self.min_size:
            raise partition_error(
                self,
                tries=1,
                best=f"smallest client size {smallest} (< min_size {self.min_size})",
                hint="raise alpha, lower num_clients, set min_size 0, or use niid_bench_labeldir (which retries)",
            )
        return finish(
            self, lists, labels, seed, meta={"empty_clients": sum(len(ix) == 0 for ix in lists)}
        )


def largest_remainder(n: int, shares: np.ndarray) -> np.ndarray:
    """floor(n * shares), plus one for each of the r = n - sum(floor) entries with the largest
    fractional part (ties: lower index first)."""
    exact = n * np.asarray(shares, dtype=np.float64)
    counts = np.floor(exact).astype(np.int64)
    r = int(n - counts.sum())
    if r > 0:
        order = np.argsort(-(exact - counts), kind="stable")
        counts[order[:r]] += 1
    # only if the shares sum above 1 by rounding; take from the smallest fractional parts
    elif r < 0:
        order = np.argsort(exact - counts, kind="stable")
        for k in order:
            if r == 0:
                break
            if counts[k] > 0:
                counts[k] -= 1
                r += 1
    return counts
