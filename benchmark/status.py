"""``status``: done, diverged, failed (with reason), running and pending cells of a grid under a run root."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def cell_state(cell: Any, root: Path) -> tuple[str, str]:
    from benchmark.records.store import read_record
    from benchmark.runner import cell_paths

    paths = cell_paths(cell, root)
    if paths.record.exists():
        record = read_record(paths.record)
        return ("diverged", record.reason or "") if record.status == "diverged" else ("done", "")
    if paths.error.exists():
        try:
            return "failed", json.loads(paths.error.read_text())["reason"]
        except (OSError, ValueError, KeyError):
            return "failed", "(unreadable error.json)"
    claim = paths.cell_dir / "claim.json"
    if claim.exists() or (paths.pretrain_dir / "ckpt").exists():
        return "running", ""
    return "pending", ""


def grid_status(cells: Sequence[Any], root: Path) -> str:
    counts: Counter[str] = Counter()
    lines = []
    for cell in cells:
        state, reason = cell_state(cell, root)
        counts[state] += 1
        lines.append(f"{cell.cell_id}  {state:8s}  {cell.label()}" + (f"\n    reason: {reason}" if reason else ""))
    summary = "  ".join(f"{k}: {counts[k]}" for k in ("done", "diverged", "failed", "running", "pending"))
    return "\n".join([*lines, summary])
