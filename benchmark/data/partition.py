"""The partition contract (docs/protocols/partitioning.md §1, §4, §5): ``Partition``,
``PartitionError``, digest and statistics.

Partitioners are frozen dataclasses holding their parameters and registered in ``PARTITIONERS``;
calling one with ``(labels, num_clients, seed)`` returns a :class:`Partition`. They are pure
functions of the label array: no dataset I/O, no global RNG (they use
``np.random.RandomState(seed)``, whose stream NumPy keeps frozen, so digests are stable).
"""

from __future__ import annotations

import hashlib
import zlib
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from benchmark.contracts.data_types import Partition

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell


def cell_partition(cell: Cell, labels: np.ndarray) -> Partition:
    """The client split of ``labels`` a cell asks for (its public split carved first, when it has
    one): the engine's partition (``benchmark.engine.stages.build_partition``) and the one the cost
    projection carves from a train split's size (``benchmark.calibration.projection``)."""
    from benchmark.contracts.registries import PARTITIONERS, PUBLIC_SPLITS
    from benchmark.core.config import from_mapping

    partitioner = from_mapping(PARTITIONERS.get(cell.partition.name), dict(cell.partition.params))
    k = cell.fl.num_clients
    if cell.public is not None:
        carve = from_mapping(PUBLIC_SPLITS.get(cell.public.name), dict(cell.public.params))
        return carve.apply(labels, k, cell.partition_seed, partitioner)
    return partitioner(labels, k, cell.partition_seed)


class PartitionError(ValueError):
    """A partition constraint could not be met within ``max_tries``; the message says how to relax
    it."""


class Partitioner(Protocol):
    version: ClassVar[str]

    def __call__(self, labels: np.ndarray, num_clients: int, seed: int) -> Partition: ...


def labels_sha256(labels: np.ndarray) -> str:
    return hashlib.sha256(np.asarray(labels, dtype="<i8").tobytes()).hexdigest()


def substream(seed: int, tag: str) -> np.random.RandomState:
    """Named sub-stream (docs/protocols/partitioning.md §1.4): RandomState(SeedSequence([seed,
    crc32(tag)]).generate_state(1)[0])."""
    word = np.random.SeedSequence([int(seed), zlib.crc32(tag.encode())]).generate_state(1)[0]
    return np.random.RandomState(int(word))


def check_labels(labels: np.ndarray, num_clients: int) -> tuple[np.ndarray, int]:
    """Validate the common inputs (§1.1, §1.8); returns (int64 labels, C)."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError("labels must be a non-empty 1-d array")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integers, got {labels.dtype}")
    labels = labels.astype(np.int64, copy=False)
    if labels.min() < 0:
        raise ValueError("labels must be >= 0")
    num_classes = int(labels.max()) + 1
    missing = np.setdiff1d(np.arange(num_classes), labels)
    if missing.size:
        raise ValueError(
            f"classes {missing[:10].tolist()} have no sample; labels must cover 0..C-1"
        )
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ValueError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    if num_clients > labels.size:
        raise ValueError(f"num_clients = {num_clients} exceeds the {labels.size} training samples")
    return labels, num_classes


def finalize(
    lists: list[np.ndarray] | list[list[int]],
    n: int,
    *,
    spec: dict[str, Any],
    meta: dict[str, Any] | None = None,
    domain: np.ndarray | None = None,
) -> Partition:
    """Sort each client's indices, compute ``dropped`` as the complement, and check disjointness."""
    clients = tuple(np.sort(np.asarray(ix, dtype=np.int64)) for ix in lists)
    allix = np.concatenate(clients) if clients else np.zeros(0, np.int64)
    if np.unique(allix).size != allix.size:
        raise AssertionError(f"partitioner {spec.get('name')} produced overlapping clients")
    mask = np.ones(n, dtype=bool)
    mask[allix] = False
    return Partition(
        clients, np.flatnonzero(mask).astype(np.int64), domain, None, dict(meta or {}), dict(spec)
    )


def _entropy_bits(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, -p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    return terms.sum(axis=-1)


def partition_stats(partition: Partition, labels: np.ndarray, num_classes: int) -> dict[str, Any]:
    """Statistics of docs/protocols/partitioning.md §4 (sizes, label entropy, classes per client,
    EMD to the global mix)."""
    counts = partition.label_counts(labels, num_classes)
    sizes = counts.sum(axis=1)
    nonempty = sizes > 0
    p = counts / np.maximum(sizes, 1)[:, None]
    q = counts.sum(axis=0) / max(int(counts.sum()), 1)
    entropy = _entropy_bits(p)
    emd = np.abs(p - q[None, :]).sum(axis=1)
    cpc_any = (counts >= 1).sum(axis=1)
    cpc_1pct = (counts >= 0.01 * sizes[:, None]).sum(axis=1)
    mean_size = float(sizes.mean())
    out: dict[str, Any] = {
        "num_clients": len(sizes),
        "num_classes": int(num_classes),
        "size_min": int(sizes.min()),
        "size_max": int(sizes.max()),
        "size_mean": mean_size,
        "size_std": float(sizes.std()),
        "size_cv": float(sizes.std() / mean_size) if mean_size > 0 else 0.0,
        "empty_clients": int((~nonempty).sum()),
        "dropped": len(partition.dropped),
        "public": len(partition.public_indices) if partition.public_indices is not None else 0,
        "label_entropy_mean": float(entropy[nonempty].mean()) if nonempty.any() else 0.0,
        "label_entropy_min": float(entropy[nonempty].min()) if nonempty.any() else 0.0,
        "label_entropy_norm_mean": float(entropy[nonempty].mean() / np.log2(num_classes))
        if nonempty.any() and num_classes > 1
        else 0.0,
        "classes_per_client_any": float(cpc_any[nonempty].mean()) if nonempty.any() else 0.0,
        "classes_per_client_1pct": float(cpc_1pct[nonempty].mean()) if nonempty.any() else 0.0,
        "emd_mean": float(emd[nonempty].mean()) if nonempty.any() else 0.0,
        "emd_weighted": float((emd * sizes).sum() / max(int(sizes.sum()), 1)),
        "sizes": sizes.tolist(),
        "counts": counts.tolist(),
        "tries": int(partition.meta.get("tries", 1)),
        "constraint_violated": bool(partition.meta.get("constraint_violated", False)),
    }
    # the server's public split (FLESD D_pub, docs/methods/flesd.md §6 item 12)
    if partition.public_indices is not None:
        pub = np.asarray(labels)[partition.public_indices]
        out["public_class_counts"] = np.bincount(pub, minlength=num_classes).astype(int).tolist()
    return out
