"""Names that become paths: a record's method and cell id name the folders and files that
``collect`` and ``accept`` write under ``results/``. They are checked where a record is
read (the schema refuses a record whose names do not match), and every write is confined to the
results root as a second guard. Torch-free."""

from __future__ import annotations

import re
from pathlib import Path

from benchmark.records.record_error import RecordError

# a method's registry name: a lower-case slug (no "/"; ".." is refused separately)
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]*")
ID_RE = re.compile(r"[0-9a-f]{16}")  # cell ids: 16 hex characters of a sha256
MAX_NAME = 64


class UnsafeName(RecordError):
    """A name that would become a path (a method, a cell id) is not one the runner writes."""


def check_name(kind: str, value: object) -> str:
    """``value`` when it is a lower-case slug of at most :data:`MAX_NAME` characters, no ``..``."""
    if (
        not isinstance(value, str)
        or len(value) > MAX_NAME
        or not NAME_RE.fullmatch(value)
        or ".." in value
    ):
        raise UnsafeName(
            f"{kind} {_show(value)} is not a valid name (lower-case letters, digits, "
            f"'_', '.', '-', at most {MAX_NAME} characters, no '..'): it would name a "
            "folder under results/"
        )
    return value


def check_id(kind: str, value: object) -> str:
    """``value`` when it is 16 lower-case hex characters (a cell id)."""
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise UnsafeName(
            f"{kind} {_show(value)} is not 16 lower-case hex characters: it would "
            "name a file under results/"
        )
    return value


def confined(root: Path, path: Path) -> Path:
    """``path`` when it resolves inside ``root`` (the second guard behind the name checks), else
    UnsafeName."""
    resolved = Path(path).resolve()
    if not resolved.is_relative_to(Path(root).resolve()):
        raise UnsafeName(f"refusing to write {_show(str(path))}: it is outside {root}")
    return resolved


def _show(value: object) -> str:
    """A name quoted on one line, control characters escaped, long ones cut."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = ["ID_RE", "MAX_NAME", "NAME_RE", "UnsafeName", "check_id", "check_name", "confined"]
