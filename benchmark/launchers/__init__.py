"""Launchers decide only where ``run_cell`` executes (which cells to run is ``run``'s,
benchmark/commands/run.py). All three register here, one way: as lazy
``"module:Class"`` targets, imported on first use (Ray and submitit are optional, heavy imports; the
local launcher is registered the same way so that one list names every launcher)."""

from benchmark.contracts.registries import LAUNCHERS
from benchmark.launchers.execute import CellOutcome, execute_cell
from benchmark.launchers.local import LocalLauncher

LAUNCHERS.register("local", target="benchmark.launchers.local:LocalLauncher")
LAUNCHERS.register("ray", target="benchmark.launchers.ray:RayLauncher")
LAUNCHERS.register(
    "slurm", aliases=("submitit",), target="benchmark.launchers.submitit:SubmititLauncher"
)

__all__ = ["CellOutcome", "LocalLauncher", "execute_cell"]
