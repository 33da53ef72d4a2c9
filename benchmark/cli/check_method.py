"""``check-method``: the conformance checks of one method."""

from __future__ import annotations

import argparse

from benchmark.core.errors import UsageError


def cmd_check_method(args: argparse.Namespace) -> int:
    from benchmark.commands.check_method import check_method

    if args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    report = check_method(args.name, rounds=args.rounds, knn=not args.no_knn, live=not args.no_live)
    print(report.format())
    return 0 if report.ok else 1
