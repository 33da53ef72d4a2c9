"""``status``: done, diverged, failed (with reason), running and pending cells of a grid under a run root.

A cell is *running* while a live runner holds its claim (``benchmark.locks``: heartbeat fresh, pid alive on this
host); a claim left by a dead runner does not count, and such a cell is *pending* (resumable from its latest round
checkpoint, which is shown). The run directory (``benchmark.rundir.RunDir.status``) answers each cell's state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.rundir import CELL_STATES, RunDir

STATES = CELL_STATES


def grid_status(cells: Sequence[Any], root: Path) -> str:
    counts: Counter[str] = Counter()
    lines = []
    for cell in cells:
        st = RunDir.of(cell, root).status(cell.fl.rounds)
        counts[st.state] += 1
        key = "reason" if st.state in ("failed", "diverged") else "note"
        lines.append(f"{cell.cell_id}  {st.state:8s}  {cell.label()}" + (f"\n    {key}: {st.detail}" if st.detail else ""))
    summary = "  ".join(f"{k}: {counts[k]}" for k in STATES)
    return "\n".join([*lines, summary])
