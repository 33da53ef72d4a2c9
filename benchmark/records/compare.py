"""Do two records hold the same numbers? Every score (every value of every task, by task and card
id), the final-state digest, partition digest, status, rounds, bytes moved and backbone fingerprint.
Provenance (times, environment, W&B reference) may differ. Used by ``python -m benchmark verify``
and ``scripts/same_numbers.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.records.store import load_records


def numbers(record: Any) -> dict[str, Any]:
    """The fields of a record that are its numbers (equal records of one cell: equal dicts)."""
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


def differences(a: Any, b: Any) -> list[str]:
    """One line per number that differs between two records of one cell (``key: a != b``); [] when
    identical."""
    na, nb = numbers(a), numbers(b)
    return [f"{k} {na[k]} != {nb[k]}" for k in na if na[k] != nb[k]]


def compare_roots(before: Path, after: Path, *, subset: bool = False) -> list[str]:
    """Every record under ``before`` against the record of the same cell id under ``after``; one
    line per difference (a record missing on either side is one). ``subset``: only the cells
    ``after`` holds."""
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
        problems += [f"{cid} ({a[cid].method}): {line}" for line in differences(a[cid], b[cid])]
    if not a:
        problems.append(
            f"no records under {before}" + (" for the cells under AFTER" if subset else "")
        )
    return problems


__all__ = ["compare_roots", "differences", "numbers"]
