"""The census of a grid's CPU kernels: every ATen operation a set of cells calls, written down once
per shape (``benchmark.portable.ops``), for the kernel fingerprint.

The cells run here, in this process, from scratch in a temporary run root, under a
``TorchDispatchMode`` that sees every operation below autograd (forward, backward and the
optimizer's) and keeps the first call of each shape (``skipped``: the shapes of calls it could not write down). The process must already be in the cells'
kernel mode (``benchmark.commands.kernel_fingerprint`` starts it so). The census watches; it changes
no number (the same ops run in the same order).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch.utils._python_dispatch import TorchDispatchMode

from benchmark.portable.math_ops import calls_vml
from benchmark.portable.ops import Unwritable, call_of, is_exact, op_name, shape_key

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell


class Census(TorchDispatchMode):
    """Records the first call of every (operator, argument shapes) that rounds (``is_exact`` is
    false) on CPU tensors; ``skipped`` counts the shapes it could not write down, by operator, and
    ``vml`` the calls that ran in MKL's vector maths (``portable_math.calls_vml``), by operator."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, dict[str, Any]] = {}
        self.skipped: dict[str, int] = {}
        self._exact: dict[Any, bool] = {}
        self._unwritable: set[str] = set()
        self.vml: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        kwargs = kwargs or {}
        if func not in self._exact:
            self._exact[func] = is_exact(op_name(func))
        if not self._exact[func]:
            self._note(func, args, kwargs)
        return func(*args, **kwargs)

    def _note(self, func: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        name = op_name(func)
        if calls_vml(name, args):
            self.vml[name] = self.vml.get(name, 0) + 1
        key = shape_key(func, args, kwargs)
        if key in self.calls or key in self._unwritable:
            return
        try:
            self.calls[key] = call_of(func, args, kwargs)
        except Unwritable:
            self._unwritable.add(key)
            self.skipped[name] = self.skipped.get(name, 0) + 1


def census_cells(cells: Sequence[Cell], progress: Callable[[str], None] | None = None) -> Census:
    """Run ``cells`` here on the CPU under one census, and return it."""
    from benchmark.launchers.execute import execute_cell
    from benchmark.launchers.options import RunOptions

    census = Census()
    options = RunOptions(device="cpu", wandb=False)
    for cell in cells:
        with tempfile.TemporaryDirectory(prefix="fssl-census-") as tmp, census:
            outcome = execute_cell(cell, Path(tmp), options)
        if outcome.status != "done":
            raise RuntimeError(f"census: cell {cell.cell_id} {outcome.status}: {outcome.error}")
        if progress is not None:
            progress(f"{cell.cell_id}  {cell.label()}: {len(census.calls)} calls so far")
    return census


__all__ = ["Census", "census_cells"]
