"""What the box cannot hide (docs/integrity.md): a plugin can carry data in its own files. ``accept``
lists every non-code file of each plugin distribution a bundle runs, with its size, and names for a
reviewer every one above :data:`REVIEW_BYTES`. Read from the distribution's RECORD and its package
folders on disk: nothing of the plugin is imported."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from benchmark.core.provenance import counted
from benchmark.records.acceptance_files import PLUGIN_FILE_REVIEW_BYTES

# a non-code file above this size is named in the acceptance for a reviewer (one figure with the
# site's method page, which marks the same files)
REVIEW_BYTES = PLUGIN_FILE_REVIEW_BYTES
CODE_SUFFIXES = (".py", ".pyi", ".pth")


def non_code_files(distribution: str) -> list[tuple[str, int]]:
    """(path, bytes) of every file ``distribution`` installs that is not Python source: its RECORD
    (the metadata folder left out) and every file under its top-level packages (an editable
    install's RECORD lists none of them)."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return []
    found: dict[str, int] = {}
    for f in dist.files or []:
        rel = f.as_posix()
        path = Path(str(f.locate()))
        if ".dist-info/" in rel or not counted(rel) or not path.is_file():
            continue
        found[rel] = path.stat().st_size
    tops = {t for t, dists in metadata.packages_distributions().items() if distribution in dists}
    tops |= set((dist.read_text("top_level.txt") or "").split())
    for top in sorted(tops):
        try:  # a top-level name is found without running it
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in Path(root).rglob("*"):
                rel = f"{top}/{path.relative_to(root).as_posix()}"
                if counted(rel) and path.is_file() and not path.is_symlink():
                    found[rel] = path.stat().st_size
    return sorted((rel, n) for rel, n in found.items() if not rel.endswith(CODE_SUFFIXES))


def plugin_file_lines(distributions: Iterable[str]) -> tuple[list[str], list[str]]:
    """(one line per plugin with its non-code files and sizes, one line per file a reviewer must
    look at) for ``accept``'s report."""
    listed, review = [], []
    for dist in sorted(set(distributions)):
        files = non_code_files(dist)
        shown = ", ".join(f"{rel} ({n:,} B)" for rel, n in files) or "none"
        listed.append(f"plugin {dist}: non-code files: {shown}")
        review += [
            f"REVIEW  plugin {dist}: {rel} holds {n:,} bytes (over {REVIEW_BYTES:,}): a plugin's "
            "own files are the one thing the box cannot hide (docs/integrity.md)"
            for rel, n in files
            if n > REVIEW_BYTES
        ]
    return listed, review


__all__ = ["REVIEW_BYTES", "non_code_files", "plugin_file_lines"]
