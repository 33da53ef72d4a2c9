"""Launchers decide only where ``run_cell`` executes. ``local`` is built in; Ray and submitit load lazily."""

from benchmark.launchers.local import CellOutcome, LocalLauncher  # noqa: F401
