"""Checks before any cell runs: is every dataset there, and can every partition be drawn?

``missing_datasets_fast`` reads only the grid and the torch-free data declarations (it answers in
well under a second on a machine without the data); ``preflight`` checks the expanded cells fully
(task datasets, partition constraints such as a minimum client size). Both raise or return before
anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmark.core.errors import UsageError

if TYPE_CHECKING:
    from benchmark.contracts.cell import Cell


def _grid_dataset_values(grid: Any) -> list[Any]:
    """Every dataset a grid names: in its base, on its dataset axis, in any axis value's ``with``,
    and the datasets its tasks read (their torch-free declarations, ``register_task(reads=)``)."""
    from benchmark.contracts.registries import load_task_registrations
    from benchmark.contracts.task import task_datasets
    from benchmark.grids.expand import task_specs

    values = [grid.base.get("dataset"), *grid.axes.get("dataset", [])]
    for axis in grid.axes.values():
        values += [
            v["with"].get("dataset")
            for v in axis
            if isinstance(v, dict) and isinstance(v.get("with"), dict)
        ]
    load_task_registrations()
    values += [
        name
        for task, params in task_specs([dict(grid.base), dict(grid.axes)])
        for name in task_datasets(task, params)
    ]
    return [v for v in values if v is not None]


@dataclass(frozen=True)
class DataNeed:
    """One dataset a grid reads: whether it is under the data root, how to get it, what fetching it
    downloads (bytes, about; None: not stated) and whether it needs a Hugging Face login."""

    name: str
    available: bool
    how_to_get: str
    download_bytes: int | None
    gated: bool
    hub_id: str | None
    fetchable: bool  # has a ``prefetch`` (digits ships with scikit-learn)
    config: Any


def grid_data_needs(grid: Any, data_root: str | Path | None) -> list[DataNeed]:
    """Every registered dataset a grid's cells and tasks name, by name, found without importing
    torch or any method (unknown names are left to the full expansion to report)."""
    import benchmark.data.datasets
    import benchmark.data.hub_datasets  # noqa: F401
    from benchmark.contracts.registries import DATASETS
    from benchmark.core.config import from_mapping
    from benchmark.data.datasets import resolve_data_root

    root = resolve_data_root(data_root)
    needs: dict[str, DataNeed] = {}
    for value in _grid_dataset_values(grid):
        comp = {"name": value} if isinstance(value, str) else dict(value)
        name = comp.pop("name", None)
        comp.pop("with", None)
        if not isinstance(name, str) or name not in DATASETS:
            continue  # unknown names are reported by the full expansion
        cfg = from_mapping(DATASETS.get(name), comp)
        key = DATASETS.canonical(name)
        if key in needs and not needs[key].available:
            continue
        ok = cfg.available(root)
        needs[key] = DataNeed(
            name=key,
            available=ok,
            how_to_get="" if ok else cfg.how_to_get(root),
            download_bytes=getattr(cfg, "download_bytes", None),
            gated=bool(getattr(cfg, "gated", False)),
            hub_id=getattr(cfg, "hub_id", None) or None,
            fetchable=hasattr(cfg, "prefetch"),
            config=cfg,
        )
    return [needs[k] for k in sorted(needs)]


def missing_datasets_fast(grid: Any, data_root: str | Path | None) -> list[str]:
    """The datasets a grid's cells and tasks name that are absent (how to get each), found without
    importing torch or any method, so that a run on a machine without the data stops at once (the
    full preflight then checks partitions)."""
    return [n.how_to_get for n in grid_data_needs(grid, data_root) if not n.available]


def download_size(needs: Sequence[DataNeed]) -> str | None:
    """'about 36.5 GB' for what fetching ``needs`` downloads ('at least' when a size is not
    stated); None when no size is stated."""
    known = [n.download_bytes for n in needs if n.download_bytes]
    if not known:
        return None
    prefix = "about" if len(known) == len(needs) else "at least"
    return f"{prefix} {format_bytes(sum(known))}"


def format_bytes(n: int) -> str:
    """``n`` bytes as people read a download: GB from 1 GB, else MB."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _task_datasets_missing(cell: Cell, root: Path, missing: dict[str, str]) -> None:
    from benchmark.contracts.registries import DATASETS
    from benchmark.contracts.task import task_datasets
    from benchmark.core.config import from_mapping

    for spec in cell.tasks:  # data a task reads besides the cell's own (transfer targets, COCO)
        for name in task_datasets(spec.name, spec.params):
            extra = from_mapping(DATASETS.get(name), {})
            if not extra.available(root):
                missing[name] = extra.how_to_get(root)


def preflight(cells: Sequence[Cell], data_root: str | Path | None) -> list[str]:
    """Check data availability and partition constraints before anything is written.

    Returns the list of missing datasets (each with how to get it); raises ``UsageError`` for
    impossible partitions.
    """
    from benchmark.contracts.registries import DATASETS
    from benchmark.core.config import from_mapping
    from benchmark.data.datasets import resolve_data_root
    from benchmark.engine.stages import build_partition, load_data

    root = resolve_data_root(data_root)
    missing: dict[str, str] = {}
    checked: dict[str, Any] = {}
    for cell in cells:
        _task_datasets_missing(cell, root, missing)
        ds_cfg = from_mapping(DATASETS.get(cell.dataset.name), dict(cell.dataset.params))
        if not ds_cfg.available(root):
            missing[cell.dataset.name] = ds_cfg.how_to_get(root)
            continue
        key = json.dumps(
            [
                cell.dataset.name,
                cell.dataset.params,
                cell.partition.name,
                cell.partition.params,
                cell.fl.num_clients,
                cell.partition_seed,
                cell.public and cell.public.name,
                cell.public and cell.public.params,
            ],
            sort_keys=True,
        )
        if key not in checked:
            try:
                checked[key] = build_partition(cell, load_data(cell, data_root).train.labels)
            except ValueError as exc:
                raise UsageError(
                    f"{cell.partition.label()} with {cell.fl.num_clients} clients on "
                    f"{cell.dataset.name}: {exc}"
                ) from None
        check_method_data(cell, checked[key])
    return [missing[k] for k in sorted(missing)]


def check_method_data(cell: Cell, part: Any) -> None:
    """``stages.check_method_data`` at the door: its ValueError as a UsageError naming the cell."""
    from benchmark.engine.stages import check_method_data as check

    try:
        check(cell, part)
    except ValueError as exc:
        raise UsageError(
            f"{cell.method.name} on {cell.dataset.name} ({cell.partition.label()}): {exc}"
        ) from None


def check_precision(cells: Sequence[Cell], device: str | None) -> None:
    """A bf16 cell on a CUDA device without bf16 support stops at the door (it would run emulated or
    fail)."""
    wanted = sorted({c.precision for c in cells})
    if "bf16" not in wanted:
        return
    import torch

    name = device or "auto"
    on_cuda = name.startswith("cuda") or (name == "auto" and torch.cuda.is_available())
    if on_cuda and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        raise UsageError(
            f"the grid trains in bf16 but {torch.cuda.get_device_name()} does not support it: run the "
            "cells in fp16 (with a gradient scaler) or fp32 by setting `precision:` in a copy of the grid"
        )


__all__ = [
    "DataNeed",
    "check_method_data",
    "check_precision",
    "download_size",
    "format_bytes",
    "grid_data_needs",
    "missing_datasets_fast",
    "preflight",
]
