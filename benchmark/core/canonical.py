"""Canonical JSON and content digests: the one definition (torch-free; cells, cards, partitions and
records use it), and the sha256 of a file (partition feature artifacts, bundled checkpoints).

``canonical_json`` is compact, key-sorted, ASCII-agnostic and refuses NaN, so equal content gives
equal bytes and a digest names content (docs/design.md §4.8). ``pretty_json`` is the same content
indented for files people read (records, score files); re-serialising a record is byte-identical.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def to_plain(obj: Any) -> Any:
    """Dataclasses, mappings, tuples and numpy scalars → JSON-ready plain values (dict, list, str,
    int, float)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    # numpy / torch scalars
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__} {obj!r}")


def canonical_json(obj: Any) -> str:
    return json.dumps(
        to_plain(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def pretty_json(obj: Any) -> str:
    """Sorted keys, indent 2, no NaN, a final newline: the form of every JSON file the harness
    writes."""
    return (
        json.dumps(to_plain(obj), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
        + "\n"
    )


def digest(obj: Any) -> str:
    """sha256 hex of the canonical JSON of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def short_digest(obj: Any, n: int = 16) -> str:
    return digest(obj)[:n]


def bytes_sha256(data: bytes) -> str:
    """sha256 hex of ``data``."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | Path) -> str:
    """sha256 hex of a file's bytes, read in 1 MiB blocks (checkpoints and artifacts can be large)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


__all__ = [
    "bytes_sha256",
    "canonical_json",
    "digest",
    "file_sha256",
    "pretty_json",
    "short_digest",
    "to_plain",
]
