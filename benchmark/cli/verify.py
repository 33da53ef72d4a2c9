"""``verify``: re-run shipped cells here and compare every number with the records; ``verify
--kernels``: compare this CPU's kernels, operation by operation, with the fingerprint beside the
records."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from benchmark.cli.common import parse_seeds
from benchmark.core.errors import UsageError

KERNELS_HINT = (
    "some cells differ: `python -m benchmark verify --kernels` names, in seconds, the operations "
    "this CPU computes otherwise than the machine that made the records (put its output in a "
    "bug report)"
)


def _results(args: argparse.Namespace) -> Path:
    results = Path(args.results)
    if not results.is_dir():
        raise UsageError(
            f"no results folder at {results.resolve()}: run verify from a checkout of the "
            "repository (its results/ holds the shipped records) or name one with --results"
        )
    return results


def cmd_verify(args: argparse.Namespace) -> int:
    if args.write and not args.kernels:
        raise UsageError("--write makes the kernel fingerprint: use it with --kernels")
    if args.kernels:
        return cmd_kernels(args)
    from benchmark.commands.verify import render, summary, verify

    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    results = _results(args)
    verdicts = verify(
        args.grid,
        results=results,
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
    if any(v.status == "different" for v in verdicts):
        print(KERNELS_HINT)
    return 0 if verdicts and all(v.ok for v in verdicts) else 1


def cmd_kernels(args: argparse.Namespace) -> int:
    """``verify --kernels [--write]``: 0 every operation the same, 1 one differs, 2 no check."""
    from benchmark.portable import fingerprint as kf

    path = Path(args.fingerprint) if args.fingerprint else _results(args) / kf.FINGERPRINT
    if args.write:
        kf.make(
            args.grid, parse_seeds(args.seeds), path, workers=args.workers or os.cpu_count() or 1
        )
        return 0
    body = kf.load(path)  # a missing or edited file is refused before anything runs
    if (reason := kf.applicability(args.device)) is not None:
        raise UsageError(f"the kernel fingerprint does not apply here: {reason}")
    print(
        f"fingerprint: {len(body['calls'])} calls of the {body['grid']} grid's "
        f"{body['cells']} cells, made on {body['machine']} (torch {body['torch']}, "
        f"{body['kernels']} kernels)",
        flush=True,
    )
    verdicts, notes = kf.check(body)
    for line in kf.render(verdicts) + notes:
        print(line)
    print(kf.summary(verdicts, notes))
    return 0 if all(v.same for v in verdicts) and not notes else 1
