"""What several subcommands share: the exit code of bad input, loading a grid's cells, run
options."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from benchmark.core.errors import UsageError

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

# bad input (UsageError and the config / registry / partition errors): one line, nothing written
EXIT_BAD_INPUT = 2


def _load_cells(
    grid_arg: Any,
    only: str | None,
    seeds: str | None = None,
    add_method: Any = (),
    add_task: Any = (),
) -> tuple[Any, list[Any]]:
    from benchmark.launchers.run_grid import load_cells

    spec = grid_spec(grid_arg, add_method, add_task)
    return load_cells(spec, only=only, seeds=parse_seeds(seeds) if seeds is not None else None)


def grid_spec(grid_arg: Any, add_method: Any = (), add_task: Any = ()) -> Any:
    """The grid ``--grid`` names, with the methods of ``--add-method`` added to its method axis
    and the tasks of ``--add-task`` to its cells' task lists."""
    from benchmark.grids.expand import load_grid, with_methods, with_tasks

    grid = with_methods(load_grid(grid_arg), list(add_method or ()))
    return with_tasks(grid, list(add_task or ()))


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must list distinct non-negative integers, got {text!r}")
    return seeds


def device_name(device: str) -> str:
    """The model of the device a run on ``device`` would use (a GPU's name, else the CPU's)."""
    import torch

    from benchmark.launchers.options import check_device
    from benchmark.records.env import machine_model

    check_device(device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return machine_model(device)


def grid_cost(cells: list[Cell], device: str, explicit: str | None) -> str:
    """The cost line of ``run --dry-run`` and ``plan``: from the calibration of the device the run
    would use (benchmark/calibration/projection.py says where it looks), else plan's FLOP model."""
    from benchmark.calibration.projection import cost_line, usable_calibration

    calibration, why = usable_calibration(device_name(device), explicit)
    return cost_line(cells, calibration, why)


def _options(args: argparse.Namespace) -> Any:
    from benchmark.launchers.options import RunOptions

    return RunOptions(device=args.device, wandb=not args.no_wandb, data_root=args.data_root)


def _launcher_config(args: argparse.Namespace) -> dict[str, Any]:
    """The chosen launcher's typed config from its command-line options (validated by
    ``build_launcher``)."""
    if args.launcher == "ray":
        return {
            "address": args.ray_address,
            "cpus_per_cell": args.cpus_per_cell,
            "gpus_per_cell": args.gpus_per_cell,
        }
    if args.launcher in ("slurm", "submitit"):
        gpus = args.gpus_per_cell
        return {
            "folder": args.slurm_folder,
            "cluster": args.slurm_cluster,
            "partition": args.slurm_partition,
            "timeout_min": args.slurm_time,
            "gpus_per_node": int(gpus) if gpus >= 1 else 0,
            "cpus_per_task": max(1, int(args.cpus_per_cell)),
            "array_parallelism": args.slurm_parallelism,
        }
    return {
        "workers": args.workers,
        "cells_per_gpu": getattr(args, "cells_per_gpu", 1),
        "gpu_mem_per_cell": getattr(args, "gpu_mem_per_cell", 0.0),
    }
