"""The order in which a run starts its cells: the longest first (issue 53).

A pool of workers takes the cells in the order they are handed over. In the grids' own order the
cheap reference points (``no_pretrain``, ``pixels``) and the long fine-tunings (FedMAE, the random
ViT) come last, so a worker could start a long cell when the other has nothing left to do: the run
ends on one busy core. Started longest first, the last cells of the run are short and the two
workers finish close together (the longest-processing-time rule).

What a cell is expected to take is the wall time its shipped record (``results/records/v1/
<method>/<cell_id>.json``, the same cell id) measured: the order only, never a number, depends on
it, so a noisy or missing time costs wall time at most. Cells without a shipped record keep their
place ahead of the others (nothing is known of them: they may be long), in their order. Cells that
copy another cell's numbers (``benchmark.engine.sharing.shared_last``) stay behind every cell that
computes, in their order: the cell each copies has finished by the time a worker reaches it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from benchmark.records.files import read_record
from benchmark.records.names import UnsafeName, check_id, check_name
from benchmark.records.schema import RecordError
from benchmark.records.store import RESULTS_SUBDIR

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell

# the shipped records of the checkout this package runs from (absent in an installed wheel: then
# no cell has an expected time and the order is the grid's)
SHIPPED_RESULTS = Path(__file__).resolve().parents[2] / "results"


def expected_seconds(cells: Sequence[Cell], results: Path = SHIPPED_RESULTS) -> dict[str, float]:
    """The wall time each cell's shipped record measured, by cell id (cells without a readable
    record of the same cell id and method under ``results`` are left out)."""
    out: dict[str, float] = {}
    for cell in cells:
        try:
            check_name("method", cell.method.name)
            check_id("cell_id", cell.cell_id)
        except UnsafeName:
            continue
        path = Path(results) / RESULTS_SUBDIR / cell.method.name / f"{cell.cell_id}.json"
        if not path.is_file():
            continue
        try:
            record = read_record(path)
        except (OSError, RecordError, ValueError):
            continue
        seconds = record.compute.wall_time_s
        if record.cell_id == cell.cell_id and math.isfinite(seconds) and seconds >= 0:
            out[cell.cell_id] = float(seconds)
    return out


def longest_first(cells: Sequence[Cell], expected: Mapping[str, float]) -> list[Cell]:
    """``cells`` in decreasing ``expected`` time (by cell id), those without one (or without a
    finite one) ahead of them in their order; stable: cells of equal time keep their order."""

    def knows(cell: Cell) -> bool:
        return cell.cell_id in expected and math.isfinite(expected[cell.cell_id])

    unknown = [c for c in cells if not knows(c)]
    known = [c for c in cells if knows(c)]
    return unknown + sorted(known, key=lambda c: -expected[c.cell_id])


def launch_order(cells: Sequence[Cell], results: Path = SHIPPED_RESULTS) -> list[Cell]:
    """The order a run hands ``cells`` to its launcher: the cells that compute longest first
    (``longest_first`` by ``expected_seconds``), then the cells that copy one of them
    (``benchmark.engine.sharing.shared_last``) in their order."""
    from benchmark.engine.sharing import computed_and_copies

    computed, copies = computed_and_copies(cells)
    return longest_first(computed, expected_seconds(computed, results)) + copies


__all__ = ["SHIPPED_RESULTS", "expected_seconds", "launch_order", "longest_first"]
