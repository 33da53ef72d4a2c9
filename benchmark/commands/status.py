"""``status``: the state of every cell of a run root."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmark.commands.run import _load_cells


def cmd_status(args: argparse.Namespace) -> int:
    from benchmark.runroot.status_counts import grid_status_counts

    _, cells = _load_cells(args.grid, args.only, args.seeds, args.add_method, args.add_task)
    text, counts = grid_status_counts(cells, Path(args.root))
    print(text)
    return 1 if counts["failed"] or counts["diverged"] else 0  # the run's exit-code policy
