"""Cells whose numbers cannot depend on their partition, computed once per run root and shared.

A grid crosses every method with every partition, but some cells never read the partition: a
reference point that trains nothing on the clients (``no_pretrain``'s seeded initialisation,
``pixels``: ``MethodBase.partition_free``) or a ``pooled`` method (``central_ssl``), which trains on
the union of the clients' shards, and the union is the same under any partition that drops nothing.
When, in addition, every task of the cell declares that it does not read the partition
(``reads_partition = False``: kNN, the linear probe, fine-tuning, reconstruction; the per-client
probe reads it), the cell's pre-training and scores are those of any other cell of the run root that
differs from it only in its partition (and partition seed) and pools the same images.

:func:`share_key` names that class of cells: the cell without ``partition`` and ``partition_seed``,
plus what of the partition the pre-training sees (nothing, or the digest of the pooled union and of
the public split). The first cell of a class to finish registers itself under
``<root>/_pretrain/_shared/<key>.source.json`` (not named like a record: ``collect`` reads a
``*.json`` with a 16-hex name as one); the others copy its pre-trained state into their own
pre-training folder (so every record keeps its own checkpoint, whose digest is the record's
``final_state_digest``) and its task scores into their own score files, and their record says where
they came from (``compute.reused_from``). Each record keeps its own partition digest, partition
statistics and provenance; every number is the computed cell's, bit for bit. A lock per key makes a
second runner wait for the first instead of computing the same thing beside it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.contracts.cell import Cell
from benchmark.contracts.data_types import Partition
from benchmark.contracts.registries import METHODS, TASKS
from benchmark.core.canonical import short_digest
from benchmark.records.files import atomic_replace, atomic_write_text
from benchmark.runroot.rundir import PRETRAIN_ROOT, RunDir

_HEX = re.compile(r"[0-9a-f]{16}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
SHARED_DIR = "_shared"  # under <root>/_pretrain/ (not a pre-training key: those are 16 hex digits)


def _index_digest(indices: np.ndarray) -> str:
    arr = np.ascontiguousarray(np.sort(np.asarray(indices, dtype=np.int64)))
    return hashlib.sha256(arr.tobytes()).hexdigest()[:16]


def tasks_read_partition(cell: Cell) -> bool:
    """Does any task of the cell read the partition (a task that does not say it does not: yes)?"""
    return any(getattr(TASKS.get(t.name), "reads_partition", True) for t in cell.tasks)


def pretraining_sees(cell: Cell, partition: Partition) -> str | None:
    """What of the partition the cell's pre-training sees: "nothing" for a partition-free method,
    the digest of the pooled union and of the public split for a pooled one; None when it sees the
    clients' shards (the cell is the partition's own)."""
    cls = METHODS.get(cell.method.name)
    if getattr(cls, "partition_free", False):
        return "nothing"
    if getattr(cls, "federation", "federated") == "pooled":
        shards = [np.asarray(s) for s in partition.client_indices]
        union = np.concatenate(shards) if shards else np.zeros(0, dtype=np.int64)
        public = partition.public_indices
        return (
            "pooled:"
            + _index_digest(union)
            + (":public:" + _index_digest(public) if public is not None else "")
        )
    return None


def share_key(cell: Cell, partition: Partition) -> str | None:
    """The key of the cells whose pre-training and scores are this cell's (see the module), or None
    when the cell's numbers may depend on its partition."""
    seen = pretraining_sees(cell, partition)
    if seen is None or tasks_read_partition(cell):
        return None
    body: dict[str, Any] = {
        k: v for k, v in cell.to_dict().items() if k not in ("partition", "partition_seed")
    }
    body["pretraining_sees"] = seen
    return short_digest(body)


def shareable(cell: Cell) -> bool:
    """Can the cell's numbers be another cell's (before its partition is drawn: a partition-free or
    pooled method, and tasks that do not read the partition)?"""
    cls = METHODS.get(cell.method.name)
    free = getattr(cls, "partition_free", False) or getattr(cls, "federation", "") == "pooled"
    return bool(free) and not tasks_read_partition(cell)


def shared_last(cells: Sequence[Cell]) -> list[Cell]:
    """``cells`` in their order, except that of the shareable cells that differ only in their
    partition, all but the first go to the end: by the time a worker reaches one, the cell it
    copies has finished, so no worker waits on the lock of a class another worker is computing."""
    first, later = computed_and_copies(cells)
    return first + later


def computed_and_copies(cells: Sequence[Cell]) -> tuple[list[Cell], list[Cell]]:
    """``shared_last``'s two parts, each in the order of ``cells``: the cells that compute (the
    first of each shareable class included) and the cells that copy one of them."""
    first: list[Cell] = []
    later: list[Cell] = []
    seen: set[str] = set()
    for cell in cells:
        if shareable(cell):
            body = {
                k: v for k, v in cell.to_dict().items() if k not in ("partition", "partition_seed")
            }
            key = short_digest(body)
            if key in seen:
                later.append(cell)
                continue
            seen.add(key)
        first.append(cell)
    return first, later


@dataclass(frozen=True)
class Shared:
    """The shared class of one cell in one run root (``share_key``)."""

    root: Path
    key: str

    @property
    def folder(self) -> Path:
        return self.root / PRETRAIN_ROOT / SHARED_DIR

    @property
    def pointer(self) -> Path:
        return self.folder / f"{self.key}.source.json"

    @property
    def lock_path(self) -> Path:
        return self.folder / f"{self.key}.lock.json"

    @contextmanager
    def lock(self, *, purpose: str = "") -> Iterator[None]:
        """Held while a cell of the class computes or copies it: a second runner waits for the
        first one's record instead of computing it again."""
        from benchmark.runroot import locks

        self.folder.mkdir(parents=True, exist_ok=True)
        claim = locks.wait_claim(self.lock_path, purpose=purpose or f"shared {self.key}")
        try:
            yield
        finally:
            claim.release()

    def source(self) -> RunDir | None:
        """The finished cell that computed the class, or None (none yet, or its record is gone)."""
        try:
            raw = json.loads(self.pointer.read_text(encoding="utf-8"))
            method, cell_id, key = str(raw["method"]), str(raw["cell_id"]), str(raw["pretrain_key"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        # names that become paths under the run root: a method name and two hex digests
        if not (_NAME.fullmatch(method) and _HEX.fullmatch(cell_id) and _HEX.fullmatch(key)):
            return None
        rd = RunDir(self.root, method, cell_id, key)
        return rd if rd.done and rd.pretrain.pretrained else None

    def register(self, rd: RunDir) -> None:
        """``rd`` (a finished cell that computed its numbers itself) computes the class."""
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            self.pointer,
            json.dumps(
                {"cell_id": rd.cell_id, "method": rd.method, "pretrain_key": rd.pretrain_key},
                sort_keys=True,
            )
            + "\n",
        )


def copy_pretrained(src: RunDir, dst: RunDir) -> None:
    """The source cell's saved pre-training, byte for byte, as ``dst``'s own (unless it has one)."""
    if dst.pretrain.pretrained:
        return
    atomic_replace(dst.pretrain.final, lambda tmp: shutil.copyfile(src.pretrain.final, tmp))


__all__ = [
    "SHARED_DIR",
    "Shared",
    "computed_and_copies",
    "copy_pretrained",
    "pretraining_sees",
    "share_key",
    "shareable",
    "shared_last",
    "tasks_read_partition",
]
