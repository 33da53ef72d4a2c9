"""``plan``: what a grid would run, without running it."""

from __future__ import annotations

import argparse

from benchmark.commands.run import _load_cells, grid_cost


def cmd_plan(args: argparse.Namespace) -> int:
    from benchmark.grids.cost import cost_table
    from benchmark.grids.grid_plan import plan_grid

    grid, cells = _load_cells(args.grid, args.only, args.seeds, args.add_method, args.add_task)
    print(plan_grid(grid, cells, throughput=args.throughput))
    print("\n".join(cost_table(cells)))
    print(grid_cost(cells, args.device, args.calibration))
    return 0
