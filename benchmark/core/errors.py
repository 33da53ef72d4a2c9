"""Errors the harness raises for a user's mistake, caught before anything is written (the CLI turns
them into exit code 2 and one line). A cell that fails while it runs is not one of these: its reason
stays in its run directory."""

from __future__ import annotations

from collections.abc import Sequence


class UsageError(ValueError):
    """Bad input: an unknown name, an impossible partition, a bad option value."""


class MissingData(UsageError):
    """Datasets the cells need are absent; ``lines`` says for each how to get it."""

    def __init__(self, grid: str, lines: Sequence[str]) -> None:
        self.grid = grid
        self.lines = tuple(lines)
        super().__init__(
            f"{len(self.lines)} dataset(s) missing for grid {grid!r}:\n"
            + "\n".join(f"  - {line}" for line in self.lines)
        )


class Interrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM, SIGHUP) turned into the unwinding Ctrl-C gives, so that every
    ``finally`` runs (scratch folders removed, half-written files undone); ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


__all__ = ["Interrupted", "MissingData", "UsageError"]
