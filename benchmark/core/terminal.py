"""Writing text from outside to a terminal: every character that is not printable escaped."""

from __future__ import annotations


def printable(text: object) -> str:
    """``str(text)`` with every character that is not printable escaped as Python writes it
    (``\\n``, ``\\x1b``, ``\\u202e``): a name from a bundle, a record, a grid or W&B can then
    neither split a one-line refusal nor colour, move or hide what the terminal shows (issue 44).
    Every line that reports a name from outside goes through here."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def visible(text: str) -> str:
    """``text`` with every Unicode format character (category Cf: bidi controls such as U+202E
    RIGHT-TO-LEFT OVERRIDE, zero-width spaces and joiners) written as its escape (``\\u202e``), the
    rest untouched: where a page shows a name from outside, such a character would reverse or hide
    what the cell shows (issue 52)."""
    import unicodedata

    if text.isascii():
        return text
    return "".join(repr(c)[1:-1] if unicodedata.category(c) == "Cf" else c for c in text)


__all__ = ["printable", "visible"]
