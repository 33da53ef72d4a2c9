"""Reading and writing record files: atomic writes that never overwrite a record, strict reads
(torch-free)."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmark.records.errors import RecordError
from benchmark.records.schema import ResultRecord, from_json, to_json

# a record's file name in a run root (benchmark.runroot.rundir re-exports it)
RECORD_FILE = "record.json"


def is_run_record(path: Path) -> bool:
    """Whether ``path`` is a run root's record file (``<root>/<method>/<cell_id>/record.json``)."""
    return Path(path).name == RECORD_FILE


class RecordExists(FileExistsError):
    """Results are immutable: a record file is never overwritten."""


def atomic_replace(path: Path, write: Callable[[Path], None]) -> None:
    """The one atomic write: ``write`` fills a temporary file in ``path``'s folder, which then
    replaces ``path`` (``os.replace``), so a reader sees the old file or the whole new one; the
    temporary file is removed if anything fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, flushed to disk before it replaces the old file."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())

    atomic_replace(path, write)


def write_record(path: Path, record: ResultRecord) -> None:
    if path.exists():
        raise RecordExists(f"{path} exists; results are immutable")
    atomic_write_text(path, to_json(record))


# a record is a few kB (the largest shipped one 15 kB; a thousand rounds or clients add tens of kB);
# a larger "record" (or /dev/zero behind a link) is not read: the site copies a record's text into
# several pages (benchmark.records.shape.MAX_TEXT bounds each string)
MAX_RECORD_BYTES = 1 << 20


def read_text_bounded(path: Path, limit: int = MAX_RECORD_BYTES) -> str:
    """The text of the regular file ``path`` if it holds at most ``limit`` bytes; RecordError
    otherwise (a device, a FIFO or a huge file is refused before it is read)."""
    try:
        # before opening: a FIFO would block the open
        if not stat.S_ISREG(Path(path).stat().st_mode):
            raise RecordError(f"{path} is not a regular file")
        with Path(path).open("rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise RecordError(f"{path} is not a regular file")
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise RecordError(f"{path} is larger than {limit:,} bytes")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"cannot read {path}: {exc}") from None


def read_record(path: Path) -> ResultRecord:
    return from_json(read_text_bounded(Path(path)))


__all__ = [
    "MAX_RECORD_BYTES",
    "RECORD_FILE",
    "RecordExists",
    "atomic_replace",
    "atomic_write_text",
    "is_run_record",
    "read_record",
    "read_text_bounded",
    "write_record",
]
