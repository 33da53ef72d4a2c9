"""The partition oracle: which partition digests a submitted record may claim."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.core import bounded_json
from benchmark.core.canonical import bytes_sha256
from benchmark.records.schema import ResultRecord
from benchmark.submission.checks import RecordCheck


class PartitionOracle:
    """The official partition digest of a cell: recomputed on the dataset, cross-checked with known
    digests."""

    def __init__(
        self, known: Mapping[str, set[str]] | None = None, data_root: str | None = None
    ) -> None:
        self._cache: dict[str, str | None] = {}
        # partition key -> (client sizes, public split size) of the partition rebuilt here
        self._sizes: dict[str, tuple[list[int], int | None]] = {}
        self.known = {k: set(v) for k, v in (known or {}).items()}
        self.data_root = data_root

    @staticmethod
    def key(cell: Mapping[str, Any]) -> str:
        """What fixes a partition: dataset, partitioner, partition seed, client count and public
        split."""
        from benchmark.core.canonical import canonical_json

        body = {k: cell.get(k) for k in ("dataset", "partition", "partition_seed", "public")}
        body["num_clients"] = (cell.get("fl") or {}).get("num_clients")
        return bytes_sha256(canonical_json(body).encode())[:16]

    def recompute(self, cell: Mapping[str, Any]) -> tuple[str | None, str]:
        key = self.key(cell)
        if key not in self._cache:
            from benchmark.contracts.cell import Cell
            from benchmark.contracts.registries import DATASETS, load_builtins
            from benchmark.core.config import from_mapping
            from benchmark.data.datasets import resolve_data_root
            from benchmark.engine.stages import build_partition, load_data

            load_builtins()
            c = Cell.from_dict(cell)
            cfg = from_mapping(DATASETS.get(c.dataset.name), dict(c.dataset.params))
            root = resolve_data_root(self.data_root)
            if not cfg.available(root):
                self._cache[key] = None
            else:
                part = build_partition(c, load_data(c, self.data_root).train.labels)
                self._cache[key] = part.digest()
                public = None if part.public_indices is None else len(part.public_indices)
                self._sizes[key] = ([int(s) for s in part.sizes()], public)
        return self._cache[key], key

    def client_sizes(self, cell: Mapping[str, Any]) -> tuple[list[int], int | None] | None:
        """(each client's number of training examples, the public split's size or None) of the
        cell's partition as rebuilt here; None when it was not (its dataset is not available)."""
        self.recompute(cell)
        return self._sizes.get(self.key(cell))

    def check(self, record: ResultRecord, check: RecordCheck) -> None:
        try:
            official, key = self.recompute(record.cell)
        except Exception as exc:  # noqa: BLE001 - a cell whose partition cannot be rebuilt is rejected
            check.fail(
                "partition",
                f"cannot rebuild the partition of the cell: {type(exc).__name__}: {exc}",
            )
            return
        known = self.known.get(key, set())
        if official is None and not known:
            check.fail(
                "partition",
                f"dataset {record.dataset!r} is not available locally and no manifest or "
                "leaderboard record holds this partition's digest (prefetch the dataset)",
            )
            return
        if official is not None and record.partition_digest != official:
            check.fail(
                "partition",
                f"partition_digest {record.partition_digest[:12]}… differs from the track's "
                f"official partition {official[:12]}… ({record.partition_label}, "
                f"partition_seed {record.cell.get('partition_seed')})",
            )
        if known and record.partition_digest not in known:
            check.fail(
                "partition",
                f"partition_digest {record.partition_digest[:12]}… differs from the digest "
                f"the leaderboard holds for {record.partition_label} "
                f"({min(known)[:12]}…)",
            )


def known_partition_digests(against: Sequence[Path], manifests: Path | None) -> dict[str, set[str]]:
    """Partition digests by partition key, from records already on the leaderboard and from grid
    manifests.

    A manifest (``results/manifests/<grid>.json``) may carry ``{"partitions": [{"cell": {...},
    "digest": ...}]}`` or cells with a ``partition_digest``; anything else in it is ignored."""
    from benchmark.records.store import load_records

    known: dict[str, set[str]] = defaultdict(set)
    if against:
        records, _ = load_records([Path(p) for p in against])
        for _, r in records:
            known[PartitionOracle.key(r.cell)].add(r.partition_digest)
    if manifests is not None and Path(manifests).is_dir():
        for path in sorted(Path(manifests).glob("*.json")):
            try:
                raw = bounded_json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            items = (
                raw.get("partitions") or raw.get("cells") or [] if isinstance(raw, Mapping) else []
            )
            for item in items if isinstance(items, list) else []:
                if isinstance(item, Mapping) and isinstance(item.get("cell"), Mapping):
                    dig = item.get("digest") or item.get("partition_digest")
                    if isinstance(dig, str):
                        known[PartitionOracle.key(item["cell"])].add(dig)
    return dict(known)
