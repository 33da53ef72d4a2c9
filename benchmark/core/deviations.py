"""The one parser of ``# DEVIATION:`` comments (docs/design.md §4.12): methods/README.md's table and
the site's method pages both list them from here. Standard library only (the leaderboard imports
it).

A deviation is a comment ``# DEVIATION: what the paper does, what the code does, why`` on the line
where the departure happens; comment lines right below it continue it (until a line that is not a
comment or starts another deviation).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

MARKER = re.compile(r"#\s*DEVIATION:?\s*(.*)")


class Deviation(NamedTuple):
    line: int  # 1-based line of the marker
    text: str  # the comment without the marker, continuation lines joined with single spaces


def parse_deviations(text: str) -> list[Deviation]:
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = MARKER.search(line)
        if not m:
            continue
        parts = [m.group(1).strip()]
        for nxt in lines[i + 1 :]:
            s = nxt.strip()
            if not s.startswith("#") or MARKER.search(s):
                break
            parts.append(s.lstrip("#").strip())
        out.append(Deviation(i + 1, " ".join(p for p in parts if p)))
    return out


def deviations(path: Path) -> list[Deviation]:
    """Every deviation in the source file ``path`` (none if it cannot be read)."""
    try:
        return parse_deviations(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return []


__all__ = ["Deviation", "deviations", "parse_deviations"]
