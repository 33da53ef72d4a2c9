"""Reading and writing record files: atomic writes that never overwrite a record, strict reads
(torch-free)."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmark.records.record_error import RecordError
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


def write_new_files(files: Sequence[tuple[Path, str]]) -> list[Path]:
    """Write each ``(path, text)`` as a new file, all of them or none: every text goes to a
    temporary file in its folder and is flushed first; then each is linked into place
    (``os.link``, so an existing file is never replaced: RecordExists). If anything fails or a
    signal interrupts, the files already in place, the temporary files and the folders made for
    them are removed again (with SIGINT, SIGTERM and SIGHUP held while that is done), and the
    exception goes on. Returns the paths written."""
    made: list[Path] = []  # folders this call created, outermost first
    temps: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    try:
        for path, text in files:
            made += _make_folders(Path(path).parent)
            remove_stale_temporaries(Path(path))
            fd, tmp = tempfile.mkstemp(
                prefix=f".{Path(path).name}.", suffix=".tmp", dir=Path(path).parent
            )
            temps.append((Path(tmp), Path(path)))
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, path in temps:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise RecordExists(
                    f"{path} appeared while it was being written; nothing written"
                ) from None
            placed.append(path)
    except BaseException:
        _undo(temps, made)
        raise
    for tmp, _ in temps:
        tmp.unlink(missing_ok=True)
    return placed


# A temporary file of write_new_files lives for the milliseconds a write takes; one older than this
# was left by a process killed between its writes (SIGKILL cannot be caught) and is removed by the
# next write into its folder (issue 44). Readers never see one: they read *.json.
STALE_TEMPORARY_S = 3600


def remove_stale_temporaries(path: Path, now: float | None = None) -> list[Path]:
    """Remove the temporary files a killed writer left for ``path`` (``.<name>.*.tmp`` in its
    folder, older than :data:`STALE_TEMPORARY_S`); the ones removed. A live writer's temporary file
    is younger and left alone."""
    import time

    now = time.time() if now is None else now
    removed = []
    for tmp in Path(path).parent.glob(f".{Path(path).name}.*.tmp"):
        try:
            info = tmp.lstat()
            if stat.S_ISREG(info.st_mode) and now - info.st_mtime > STALE_TEMPORARY_S:
                tmp.unlink()
                removed.append(tmp)
        except OSError:
            continue  # gone meanwhile
    return removed


def _make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents one by one; the ones this call created, outermost
    first (a folder another process creates meanwhile is not this call's to remove)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    made = []
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            continue
        made.append(path)
    return made


def _undo(temps: list[tuple[Path, Path]], made: list[Path]) -> None:
    """Remove what :func:`write_new_files` wrote, with the interrupting signals held meanwhile: a
    target that is a link of its temporary file (the same inode, whenever the signal came) and
    every temporary file, then the folders made for them."""
    import signal

    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        for tmp, path in temps:
            try:
                if path.exists() and os.path.samefile(tmp, path):
                    path.unlink()
            except OSError:
                pass
            tmp.unlink(missing_ok=True)
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass  # something else was put in it meanwhile: left as it is
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def write_record(path: Path, record: ResultRecord) -> None:
    if path.exists():
        raise RecordExists(f"{path} exists; results are immutable")
    atomic_write_text(path, to_json(record))


# a record is a few kB (the largest shipped one 15 kB; a thousand rounds or clients add tens of kB);
# a larger "record" (or /dev/zero behind a link) is not read: the site copies a record's text into
# several pages (benchmark.records.field_checks.MAX_TEXT bounds each string)
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
    "write_new_files",
    "write_record",
]
