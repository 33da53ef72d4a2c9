"""``verify``: re-run shipped cells here and compare every number with the records."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmark.cli.common import parse_seeds
from benchmark.core.errors import UsageError


def cmd_verify(args: argparse.Namespace) -> int:
    from benchmark.tools.verify import render, summary, verify

    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    verdicts = verify(
        args.grid,
        results=Path(args.results),
        only=args.only,
        seeds=parse_seeds(args.seeds),
        limit=args.limit,
        root=Path(args.root) if args.root else None,
        workers=args.workers,
        progress=lambda v: print(render(v), flush=True),
    )
    for v in verdicts:
        if v.status in ("missing", "invalid"):  # not run, so not printed as they finished
            print(render(v))
    print(summary(verdicts))
    return 0 if verdicts and all(v.ok for v in verdicts) else 1
