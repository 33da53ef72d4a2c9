"""Do two run roots hold the same numbers? ``python scripts/same_numbers.py BEFORE AFTER
[--subset]``

For every record under BEFORE, the record with the same cell id must exist under AFTER with the same
scores (every value of every task, by task and card id), the same final-state digest, partition
digest, status, rounds and bytes. Provenance (times, environment, W&B reference) may differ (the
comparison: benchmark.records.compare; ``python -m benchmark verify`` re-runs shipped cells and
compares alike). Used to show that a refactor of the harness moved no number (a fresh run of the
quickstart before and after the change); exits 1 on any difference, listing each. ``--subset``:
AFTER holds some of BEFORE's cells (e.g. one seed re-run against the shipped results/records); only
those are compared, and a record of AFTER missing under BEFORE is still a difference.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmark.records.compare import compare_roots as compare
from benchmark.records.store import load_records


def main(argv: list[str]) -> int:
    subset = "--subset" in argv
    argv = [a for a in argv if a != "--subset"]
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    problems = compare(Path(argv[0]), Path(argv[1]), subset=subset)
    for line in problems:
        print(line)
    n = len(load_records([Path(argv[1] if subset else argv[0])])[0])
    print(
        f"{n} records compared: "
        + ("identical numbers" if not problems else f"{len(problems)} differences")
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
