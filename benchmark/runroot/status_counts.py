"""``status``: done, diverged, failed (with reason), running and pending cells of a grid under a run
root.

A cell is *running* while a live runner holds its claim (``benchmark.runroot.locks``: heartbeat
fresh, pid alive on this host); a claim left by a dead runner does not count, and such a cell is
*pending* (resumable from its latest round checkpoint, which is shown). The run directory
(``benchmark.runroot.rundir.RunDir.status``) answers each cell's state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark.runroot.rundir import CELL_STATES, RunDir

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

STATES = CELL_STATES


def grid_status(cells: Sequence[Cell], root: Path) -> str:
    return grid_status_counts(cells, root)[0]


def grid_status_counts(cells: Sequence[Cell], root: Path) -> tuple[str, Counter[str]]:
    """The status table and the count of cells in each state (``status`` exits 1 when any failed or
    diverged)."""
    counts: Counter[str] = Counter()
    lines = []
    for cell in cells:
        st = RunDir.of(cell, root).status(cell.fl.rounds)
        counts[st.state] += 1
        key = "reason" if st.state in ("failed", "diverged") else "note"
        lines.append(
            f"{cell.cell_id}  {st.state:8s}  {cell.label()}"
            + (f"\n    {key}: {st.detail}" if st.detail else "")
        )
    summary = "  ".join(f"{k}: {counts[k]}" for k in STATES)
    return "\n".join([*lines, summary]), counts
