"""``submit``: check records for a track and bundle them."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmark.core.errors import UsageError


def cmd_submit(args: argparse.Namespace) -> int:
    from benchmark.submission.checks import SubmitError
    from benchmark.submission.submit_records import submit

    if args.track is None:
        raise UsageError(
            "submit checks records against one leaderboard track: pass --track ID (the tracks: "
            "python -m benchmark list tracks)"
        )
    try:
        report = submit(
            args.records,
            track=args.track,
            out=args.out,
            tracks_file=Path(args.tracks) if args.tracks else None,
            against=args.against,
            reevaluate=args.reevaluate,
            data_root=args.data_root,
            plugin_sources=args.plugin_source,
            strict=args.strict,
        )
    except SubmitError as exc:
        raise UsageError(str(exc)) from None
    from benchmark.core.terminal import printable  # names from records, escaped line by line

    print("\n".join(printable(line) for line in report.format().splitlines()))
    return 0 if report.ok else 1
