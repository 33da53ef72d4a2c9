"""``show``: the files of one cell's run directory, in reading order."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmark.core.errors import UsageError


def cmd_show(args: argparse.Namespace) -> int:
    from benchmark.runroot.rundir import describe_files, find_cell_dirs

    root = Path(args.root)
    hits = find_cell_dirs(root, args.cell_id)
    if not hits:
        raise UsageError(f"no cell {args.cell_id!r} under {root}")
    for cell_dir in hits:
        print(f"# {cell_dir}")
        for name, path in describe_files(cell_dir):
            print(f"## {name}")
            print(path.read_text())
    return 0
