"""``ledger``: the checkpoint ledger of a results folder (``benchmark.submission.checkpoint_ledger``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_ledger(args: argparse.Namespace) -> int:
    """``--backfill``: write the entries the folder's records call for and the ledger lacks (0;
    1 when a digest is claimed for two trainings: no entry for it, one line each). ``--check``:
    write nothing; 1 when an entry is missing or claimed twice, else 0."""
    from benchmark.core.errors import UsageError
    from benchmark.core.terminal import printable
    from benchmark.records.files import write_new_files
    from benchmark.submission.checkpoint_ledger import LEDGER_SUBDIR, backfill

    results = Path(args.results)
    if not (results / "records").is_dir():
        raise UsageError(f"--results {results} holds no records/ folder")
    found = backfill(results)
    for line in found.skipped:
        print(printable(f"skipped  {line}"))
    for line in found.conflicts:
        print(printable(f"CONFLICT  {line}"))
    where = results / LEDGER_SUBDIR
    if args.check:
        for path, _ in found.files:
            print(printable(f"missing  {path}"))
        print(
            f"ledger {where}: {found.held} entr{'y' if found.held == 1 else 'ies'} held, "
            f"{len(found.files)} missing, {len(found.conflicts)} conflict(s)"
        )
        return 1 if found.files or found.conflicts else 0
    written = write_new_files(found.files)
    print(
        f"ledger {where}: {len(written)} entr{'y' if len(written) == 1 else 'ies'} written, "
        f"{found.held} already held, {len(found.conflicts)} conflict(s)"
    )
    return 1 if found.conflicts else 0
