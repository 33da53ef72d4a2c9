"""``collect``: validated records from run roots (or W&B) into results/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmark.core.errors import UsageError


def cmd_collect(args: argparse.Namespace) -> int:
    from benchmark.records.store import collect

    if args.source.startswith("wandb:"):
        from benchmark.submission.wandb_collect import collect_wandb

        copied, skipped = collect_wandb(
            args.source[len("wandb:") :], Path(args.results), release=args.release
        )
    else:
        source = Path(args.source)
        if not source.exists():
            raise UsageError(f"{source} does not exist")
        copied, skipped = collect(source, Path(args.results), release=args.release)
    from benchmark.core.terminal import printable  # names from outside, escaped

    for path in copied:
        print(f"collected {printable(path)}")
    for s in skipped:
        print(f"skipped {printable(s.path)}: {printable(s.reason)}", file=sys.stderr)
    print(f"{len(copied)} records collected into {printable(args.results)}, {len(skipped)} skipped")
    return 0
