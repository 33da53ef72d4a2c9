"""``new-method``: scaffold a method (in the tree or as a plugin)."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmark.core.errors import UsageError


def cmd_new_method(args: argparse.Namespace) -> int:
    from benchmark.commands.new_method import ScaffoldError, next_steps, write_scaffold

    try:
        written = write_scaffold(
            args.name,
            Path(args.out) if args.out else None,
            force=args.force,
            plugin=args.plugin,
            class_name=args.class_name,
        )
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    for path in written:
        print(f"wrote {path}")
    print(next_steps(args.name, plugin=args.plugin, where=args.out))
    return 0
