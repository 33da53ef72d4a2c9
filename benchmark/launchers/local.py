"""The local launcher: cells run one after another in this process; a failing cell never stops the grid."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from benchmark.registries import LAUNCHERS


@dataclass(frozen=True)
class CellOutcome:
    cell_id: str
    status: Literal["done", "skipped", "failed", "diverged"]
    error: str | None = None
    record_path: str | None = None


def execute_cell(cell, root: Path, *, device: str, wandb: bool, data_root, grid: str | None) -> CellOutcome:
    """Run one cell with the standard tracker; the picklable unit every launcher calls."""
    from benchmark.runner import CellFailed, cell_paths, run_cell
    from benchmark.tracking import NullTracker, WandbTracker

    paths = cell_paths(cell, root)
    if paths.record.exists():
        return CellOutcome(cell.cell_id, "skipped", record_path=str(paths.record))
    tracker = WandbTracker() if wandb else NullTracker()
    try:
        record = run_cell(cell, root, device=device, tracker=tracker, data_root=data_root, grid=grid)
    except CellFailed as exc:
        return CellOutcome(cell.cell_id, "failed", error=str(exc))
    status = "diverged" if record is not None and record.status == "diverged" else "done"
    return CellOutcome(cell.cell_id, status, error=record.reason if record else None, record_path=str(paths.record))


@LAUNCHERS.register("local")
@dataclass(frozen=True, kw_only=True)
class LocalLauncher:
    device: str = "auto"
    wandb: bool = True
    data_root: str | None = None

    def launch(self, cells: Sequence, root: Path, *, grid: str | None = None,
               progress: Callable[[object, CellOutcome], None] | None = None) -> Iterator[CellOutcome]:
        for cell in cells:
            outcome = execute_cell(cell, root, device=self.device, wandb=self.wandb, data_root=self.data_root,
                                   grid=grid)
            if progress is not None:
                progress(cell, outcome)
            yield outcome
