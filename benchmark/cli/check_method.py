"""``check-method``: the conformance checks of one method."""

from __future__ import annotations

import argparse

from benchmark.core.errors import UsageError


def cmd_check_method(args: argparse.Namespace) -> int:
    from benchmark.commands.boxed_check import check_in_box, is_plugin

    if args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    knn, live = not args.no_knn, not args.no_live
    if is_plugin(args.name):  # a stranger's code: imported and called in the box only
        report = check_in_box(
            args.name, rounds=args.rounds, knn=knn, live=live, unboxed=args.unboxed
        )
    else:
        from benchmark.commands.check_method import check_method

        report = check_method(args.name, rounds=args.rounds, knn=knn, live=live)
    print(report.format())
    return 0 if report.ok else 1
