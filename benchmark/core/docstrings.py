"""Reading prose the code carries: the summary of a docstring (its first paragraph, on one line)."""

from __future__ import annotations


def summary(doc: str | None) -> str:
    """The first paragraph of ``doc``, its lines joined by single spaces ("" for no docstring): a
    docstring's summary may be wrapped over several lines."""
    lines = []
    for line in (doc or "").strip().splitlines():
        if not line.strip():
            break
        lines.append(line.strip())
    return " ".join(lines)


__all__ = ["summary"]
