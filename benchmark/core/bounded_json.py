"""JSON from outside, its integers bounded while it is parsed (issue 52, item 5).

``json.loads`` converts every integer it meets, and Python refuses to convert one of more than
4,300 digits with a ``ValueError`` that is not a ``json.JSONDecodeError``: a 5,000-digit integer in a
manifest or a record ended ``accept`` and ``collect`` in a traceback. Here an integer literal longer
than :data:`MAX_INT_DIGITS` digits is refused before it is converted, as a ``JSONDecodeError`` (so
every reader's one-line refusal of malformed JSON covers it). No count a record, a manifest or an
acceptance holds needs more: the largest, :data:`benchmark.records.field_checks.MAX_COUNT`
(2**53), has 16 digits; a record's range checks then apply to the converted value."""

from __future__ import annotations

import json
from typing import Any

MAX_INT_DIGITS = 20


def _bounded_int(text: str) -> int:
    digits = len(text) - (text[:1] == "-")
    if digits > MAX_INT_DIGITS:
        raise json.JSONDecodeError(
            f"an integer of {digits:,} digits (at most {MAX_INT_DIGITS}; refused before it is "
            "converted)",
            "",
            0,
        )
    return int(text)


def loads(text: str | bytes) -> Any:
    """``json.loads`` with every integer literal bounded to :data:`MAX_INT_DIGITS` digits."""
    return json.loads(text, parse_int=_bounded_int)


__all__ = ["MAX_INT_DIGITS", "loads"]
