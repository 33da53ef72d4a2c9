"""What several subcommands share: the exit code of bad input, loading a grid's cells, run
options."""

from __future__ import annotations

import argparse
from typing import Any

from benchmark.core.errors import UsageError

# bad input (UsageError and the config / registry / partition errors): one line, nothing written
EXIT_BAD_INPUT = 2


def _load_cells(grid_arg: str, only: str | None, seeds: str | None = None) -> tuple[Any, list[Any]]:
    from benchmark.launchers.run_grid import load_cells

    return load_cells(grid_arg, only=only, seeds=parse_seeds(seeds) if seeds is not None else None)


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must list distinct non-negative integers, got {text!r}")
    return seeds


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
    return {"workers": args.workers}
