"""Reading and writing record files: atomic writes that never overwrite a record, strict reads (torch-free)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from benchmark.records.errors import RecordError
from benchmark.records.schema import ResultRecord, from_json, to_json


class RecordExists(FileExistsError):
    """Results are immutable: a record file is never overwritten."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(path: Path, record: ResultRecord) -> None:
    if path.exists():
        raise RecordExists(f"{path} exists; results are immutable")
    atomic_write_text(path, to_json(record))


def read_record(path: Path) -> ResultRecord:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"cannot read {path}: {exc}") from None
    return from_json(text)


__all__ = ["RecordExists", "atomic_write_text", "read_record", "write_record"]
