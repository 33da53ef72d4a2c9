"""``doctor``: what this machine can run."""

from __future__ import annotations

import argparse

from benchmark.core.errors import UsageError


def cmd_doctor(args: argparse.Namespace) -> int:
    from benchmark.contracts.registries import METHODS, load_builtins
    from benchmark.tools.doctor import doctor, render

    if args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    load_builtins()
    methods = (
        [METHODS.canonical(m.strip()) for m in args.methods.split(",")] if args.methods else None
    )
    other, rows = doctor(methods, rounds=args.rounds, device=args.device, precision=args.precision)
    print(render(other, rows, args.tolerance))
    return 0 if all(r.ok(args.tolerance) for r in rows) else 1
