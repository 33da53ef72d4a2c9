"""``new-task``: scaffold a downstream task as an installable package."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmark.core.errors import UsageError


def cmd_new_task(args: argparse.Namespace) -> int:
    from benchmark.commands.new_method import ScaffoldError
    from benchmark.commands.new_task import task_next_steps, write_task_scaffold

    if not args.plugin:
        raise UsageError(
            "new-task scaffolds a plugin package (--plugin); an in-tree task is a module under "
            "tasks/, a line in tasks/registration.py and a card in tasks/cards/ "
            "(docs/adding-a-task.md §2)"
        )
    try:
        written = write_task_scaffold(
            args.name,
            Path(args.out) if args.out else None,
            force=args.force,
            class_name=args.class_name,
        )
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from None
    for path in written:
        print(f"wrote {path}")
    print(task_next_steps(args.name, where=args.out))
    return 0
