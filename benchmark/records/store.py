"""Record paths, atomic writes (never overwriting), iteration and ``collect`` into results/."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from benchmark.core.errors import UsageError
from benchmark.records.files import (
    RecordExists,
    atomic_write_text,
    is_run_record,
    read_record,
    write_record,
)
from benchmark.records.names import UnsafeName, check_id, check_name, confined
from benchmark.records.schema import RecordError, ResultRecord, to_json

RESULTS_SUBDIR = Path("records") / "v1"


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str
    # a name that would become a path outside results/ (benchmark.records.names)
    unsafe: bool = False


def iter_record_files(root: Path) -> Iterator[Path]:
    root = Path(root)
    if root.is_file():
        yield root
        return
    for path in sorted(root.rglob("*.json")):
        if is_run_record(path) or path.parent.parent.name == "v1" or _looks_like_record_path(path):
            yield path


def _looks_like_record_path(path: Path) -> bool:
    return len(path.stem) == 16 and all(c in "0123456789abcdef" for c in path.stem)


def load_records(roots: list[Path]) -> tuple[list[tuple[Path, ResultRecord]], list[Skipped]]:
    """Every record under ``roots`` (recursively); malformed files are returned as ``Skipped``,
    never raised."""
    good: list[tuple[Path, ResultRecord]] = []
    bad: list[Skipped] = []
    for root in roots:
        for path in iter_record_files(Path(root)):
            try:
                good.append((path, read_record(path)))
            except RecordError as exc:
                bad.append(Skipped(path, str(exc), unsafe=isinstance(exc, UnsafeName)))
    return good, bad


def results_path(results: Path, record: ResultRecord) -> Path:
    """``results/records/v1/<method>/<cell_id>.json``; UnsafeName when the names are not the
    runner's or the path would leave ``results`` (the second guard: the schema already refuses such
    names where records are read)."""
    check_name("method", record.method)
    check_id("cell_id", record.cell_id)
    path = Path(results) / RESULTS_SUBDIR / record.method / f"{record.cell_id}.json"
    confined(Path(results), path)
    return path


def refuse_unsafe(skipped: list[Skipped]) -> None:
    """UsageError (exit 2, before anything is written) naming the first record whose names are not
    safe paths."""
    unsafe = [s for s in skipped if s.unsafe]
    if unsafe:
        more = f" (and {len(unsafe) - 1} more)" if len(unsafe) > 1 else ""
        raise UsageError(f"refused {unsafe[0].path}: {unsafe[0].reason}{more}; nothing collected")


def verify_record(record: ResultRecord) -> list[str]:
    """Integrity checks that need no torch: the digest matches the content, the cell id the cell's
    content."""
    from benchmark.records.identity import cell_id_of
    from benchmark.records.integrity import integrity_problems

    try:
        problems = integrity_problems(record)
        if cell_id_of(record.cell) != record.cell_id:
            problems.append(
                f"cell_id {record.cell_id} does not match the cell's content "
                f"({cell_id_of(record.cell)})"
            )
        method = record.cell.get("method")
        if not isinstance(method, Mapping) or method.get("name") != record.method:
            problems.append("method does not match the cell")
    except Exception as exc:  # noqa: BLE001 - a record built around the schema: one problem, not a crash
        return [f"cannot be checked: {type(exc).__name__}: {exc}"]
    return problems


def release_problems(record: ResultRecord) -> list[str]:
    """Why ``record`` may not be released (shipped in the repository's results/): it must name the
    commit whose code made it, and that tree must have been clean. A record made from a tree with
    uncommitted changes (``env.git_dirty``) may reproduce, but no commit holds the code that made
    it."""
    problems = []
    sha = record.env.git_sha or ""
    if not re.fullmatch(r"[0-9a-f]{7,64}", sha):
        problems.append(
            f"no commit recorded (env.git_sha {sha!r}): nothing says which code made it"
        )
    if record.env.git_dirty:
        problems.append(
            f"made from a tree with uncommitted changes (env.git_dirty) at "
            f"{(record.env.git_sha or 'unknown')[:12]}: no commit holds the code that made it; "
            "re-make it from a clean checkout"
        )
    return problems


def collect(
    source: Path, results: Path, *, release: bool = False
) -> tuple[list[Path], list[Skipped]]:
    """Validate records under ``source`` and copy them to
    results/records/v1/<method>/<cell_id>.json. Records inside W&B offline run folders
    (``wandb/offline-run-*/files/record.json``) are found like any other. ``release``: also refuse
    what :func:`release_problems` refuses (the shipped records are collected so)."""
    records, skipped = load_records([source])
    refuse_unsafe(skipped)
    copied, refused = copy_validated(records, results, release=release)
    return copied, skipped + refused


def copy_validated(
    records: list[tuple[Path, ResultRecord]], results: Path, *, release: bool = False
) -> tuple[list[Path], list[Skipped]]:
    """The copy step every collector shares (local folders, W&B): verify (digest, cell id; with
    ``release``, also :func:`release_problems`), then write once; the same record found twice (its
    run folder and its W&B files) is copied once; rerunning copies nothing twice."""
    copied: list[Path] = []
    skipped: list[Skipped] = []
    targets = []
    for path, record in records:  # every target is checked before the first write
        try:
            targets.append(results_path(results, record))
        except UnsafeName as exc:
            skipped.append(Skipped(path, str(exc), unsafe=True))
    refuse_unsafe(skipped)
    for (path, record), target in zip(records, targets):
        problems = verify_record(record) + (release_problems(record) if release else [])
        if problems:
            skipped.append(Skipped(path, "; ".join(problems)))
            continue
        text = to_json(record)
        if target.exists():
            if (
                hashlib.sha256(target.read_bytes()).digest()
                == hashlib.sha256(text.encode()).digest()
            ):
                continue  # already collected (now or in an earlier run)
            skipped.append(
                Skipped(path, f"{target} exists with different content (records are immutable)")
            )
            continue
        atomic_write_text(target, text)
        copied.append(target)
    return copied, skipped


__all__ = [
    "RESULTS_SUBDIR",
    "RecordExists",
    "Skipped",
    "atomic_write_text",
    "collect",
    "copy_validated",
    "iter_record_files",
    "load_records",
    "read_record",
    "refuse_unsafe",
    "release_problems",
    "results_path",
    "verify_record",
    "write_record",
]
