"""``status``: done, diverged, failed (with reason), running and pending cells of a grid under a run root.

A cell is *running* while a live runner holds its claim (``benchmark.locks``: heartbeat fresh, pid alive on this
host); a claim left by a dead runner does not count, and such a cell is *pending* (resumable from its latest round
checkpoint, which is shown).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STATES = ("done", "diverged", "failed", "running", "pending")


def cell_state(cell: Any, root: Path) -> tuple[str, str]:
    from benchmark import locks
    from benchmark.launchers.local import CLAIM_FILE
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
    claim = locks.live_claim(paths.cell_dir / CLAIM_FILE)
    rounds = _checkpoint_rounds(paths.pretrain_dir)
    progress = f"round {rounds[-1]}/{cell.fl.rounds} checkpointed" if rounds else ""
    if (paths.pretrain_dir / "final.pt").exists():
        progress = "pre-training finished"
    if claim is not None:
        return "running", ", ".join(filter(None, [f"by {locks.describe(claim)}", progress]))
    return "pending", f"resumable: {progress}" if progress else ""


def _checkpoint_rounds(pretrain_dir: Path) -> list[int]:
    from benchmark.simulate import Checkpointer

    return Checkpointer(pretrain_dir / "ckpt").rounds()


def grid_status(cells: Sequence[Any], root: Path) -> str:
    counts: Counter[str] = Counter()
    lines = []
    for cell in cells:
        state, detail = cell_state(cell, root)
        counts[state] += 1
        key = "reason" if state in ("failed", "diverged") else "note"
        lines.append(f"{cell.cell_id}  {state:8s}  {cell.label()}" + (f"\n    {key}: {detail}" if detail else ""))
    summary = "  ".join(f"{k}: {counts[k]}" for k in STATES)
    return "\n".join([*lines, summary])
