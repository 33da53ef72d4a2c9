"""Launchers decide only where ``run_cell`` executes. ``local`` is built in; Ray and submitit load lazily."""

from benchmark.launchers.local import CellOutcome, LocalLauncher, execute_cell  # noqa: F401
from benchmark.registries import LAUNCHERS

LAUNCHERS.register("ray", target="benchmark.launchers.ray:RayLauncher")
LAUNCHERS.register("slurm", aliases=("submitit",), target="benchmark.launchers.submitit:SubmititLauncher")
