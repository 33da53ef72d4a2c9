"""Errors the harness raises for a user's mistake, caught before anything is written (the CLI turns
them into exit code 2 and one line). A cell that fails while it runs is not one of these: its reason
stays in its run directory."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from benchmark.core.terminal import printable


class UsageError(ValueError):
    """Bad input: an unknown name, an impossible partition, a bad option value."""


class MissingData(UsageError):
    """Datasets the cells need are absent; ``lines`` says for each how to get it.

    One of the project's multi-line errors (``lines_of`` renders it line by line): every value from
    outside that enters it (the grid's name, a data root, a path) is escaped where it enters, so a
    name carrying a line break or an escape sequence still cannot split or colour what is shown."""

    def __init__(
        self,
        grid: str,
        lines: Sequence[str],
        *,
        grid_arg: str | None = None,
        data_root: str | None = None,
        download: str | None = None,
    ) -> None:
        self.grid = grid
        self.lines = tuple(lines)
        command = f"python -m benchmark prefetch --grid {printable(grid_arg or grid)}"
        if data_root:
            command += f" --data-root {printable(data_root)}"
        self.prefetch_command = command
        size = f" ({download} to download)" if download else ""
        head = [
            f"{len(self.lines)} dataset(s) missing for grid {printable(repr(grid))}{size}; "
            "fetch them all with:",
            f"    {command}",
            "(on a machine with network), then run the grid again. Each one:",
        ]
        body = [_paragraph(printable(line)) for line in self.lines]
        self.text_lines = tuple("\n".join(head + body).split("\n"))
        super().__init__("\n".join(self.text_lines))


def _paragraph(text: str) -> str:
    """``text`` wrapped at 100 columns as a list item, never inside a `command` (it stays one
    piece to copy)."""
    glue = "\x00"  # not printable, so never in ``text`` (escaped by ``printable``)
    parts = text.split("`")
    text = "`".join(p.replace(" ", glue) if i % 2 else p for i, p in enumerate(parts))
    wrapped = textwrap.fill(
        text,
        width=100,
        initial_indent="  - ",
        subsequent_indent="    ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return wrapped.replace(glue, " ")


def lines_of(exc: BaseException) -> list[str]:
    """What the command line prints for an error, one entry a line. The project's multi-line errors
    (an exception with ``text_lines``, whose outside values were escaped where they entered) keep
    their line breaks; any other message is one line with every character that is not printable
    escaped (``printable``), a line break from outside included."""
    text_lines = getattr(exc, "text_lines", None)
    if isinstance(text_lines, tuple) and all(isinstance(t, str) for t in text_lines):
        return [printable(t) for t in text_lines]
    return [printable(exc)]


class Interrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM, SIGHUP) turned into the unwinding Ctrl-C gives, so that every
    ``finally`` runs (scratch folders removed, half-written files undone); ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


__all__ = ["Interrupted", "MissingData", "UsageError", "lines_of"]
