"""``plan``: what a grid would run, without running it."""

from __future__ import annotations

import argparse

from benchmark.cli.common import _load_cells


def cmd_plan(args: argparse.Namespace) -> int:
    from benchmark.grids.plan import plan_grid

    grid, cells = _load_cells(args.grid, args.only, args.seeds)
    print(plan_grid(grid, cells, throughput=args.throughput))
    return 0
