"""``accept``: verify a bundle and add its records to results/."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_accept(args: argparse.Namespace) -> int:
    """0: every record re-evaluated within tolerance, copied with its acceptance; 1: one line per
    failing check or score (reported vs reproduced), nothing written; 2: not a bundle, or a bad
    --results."""
    import signal

    from benchmark.core.errors import Interrupted
    from benchmark.submission.accept_bundle import accept
    from benchmark.submission.bundle import MB, BundleLimits

    limits = BundleLimits(
        max_total_bytes=args.max_total_mb * MB,
        max_file_bytes=args.max_file_mb * MB,
        max_members=args.max_members,
        max_encoder_bytes=args.max_encoder_mb * MB,
    )

    def on_signal(signum: int, frame: Any) -> None:
        # unwinds like Ctrl-C: the extracted bundle is removed, files half written are undone
        raise Interrupted(signum)

    held = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in held}
    try:
        report = accept(
            Path(args.bundle),
            Path(args.results),
            data_root=args.data_root,
            track=args.track,
            limits=limits,
            unboxed=args.unboxed,
            tracks=args.tracks,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    from benchmark.core.terminal import printable  # names from outside, escaped line by line

    print("\n".join(printable(line) for line in report.format().splitlines()))
    return 0 if report.ok else 1
