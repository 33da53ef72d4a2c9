"""Launchers decide only where ``run_cell`` executes. ``local`` is built in; Ray and submitit load
lazily."""

from benchmark.contracts.registries import LAUNCHERS
from benchmark.launchers.execute import CellOutcome, execute_cell
from benchmark.launchers.local import LocalLauncher

LAUNCHERS.register("ray", target="benchmark.launchers.ray:RayLauncher")
LAUNCHERS.register(
    "slurm", aliases=("submitit",), target="benchmark.launchers.submitit:SubmititLauncher"
)

__all__ = ["CellOutcome", "LocalLauncher", "execute_cell"]
