"""Do two run roots hold the same numbers? ``python benchmarks/same_numbers.py BEFORE AFTER
[--subset]``

For every record under BEFORE, the record with the same cell id must exist under AFTER with the same
scores (every value of every task, by task and card id), the same final-state digest, partition
digest, status, rounds and bytes. Provenance (times, environment, W&B reference) may differ. Used to
show that a refactor of the harness moved no number (a fresh run of the quickstart before and after
the change); exits 1 on any difference, listing each. ``--subset``: AFTER holds some of BEFORE's
cells (e.g. one seed re-run against the shipped results/records); only those are compared, and a
record of AFTER missing under BEFORE is still a difference.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmark.records.store import load_records


def numbers(record) -> dict:
    return {
        "status": record.status,
        "rounds": record.rounds_completed,
        "final_state": record.final_state_digest,
        "partition": record.partition_digest,
        "bytes": (record.comm.bytes_up, record.comm.bytes_down),
        "scores": sorted(
            (s.task, s.card.card_id, tuple(sorted(s.values.items()))) for s in record.scores
        ),
        "fingerprint": record.backbone_fingerprint,
    }


def compare(before: Path, after: Path, *, subset: bool = False) -> list[str]:
    a = {r.cell_id: r for _, r in load_records([before])[0]}
    b = {r.cell_id: r for _, r in load_records([after])[0]}
    if subset:
        a = {cid: r for cid, r in a.items() if cid in b}
    problems = [
        f"{cid} ({a[cid].method}): missing under {after}" for cid in sorted(a.keys() - b.keys())
    ]
    problems += [
        f"{cid} ({b[cid].method}): only under {after}" for cid in sorted(b.keys() - a.keys())
    ]
    for cid in sorted(a.keys() & b.keys()):
        na, nb = numbers(a[cid]), numbers(b[cid])
        problems += [
            f"{cid} ({a[cid].method}): {k} {na[k]} != {nb[k]}" for k in na if na[k] != nb[k]
        ]
    if not a:
        problems.append(
            f"no records under {before}" + (" for the cells under AFTER" if subset else "")
        )
    return problems


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
