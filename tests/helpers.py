"""Shared test helpers: the smallest real cells (digits 16×16, micro backbones, 2 clients)."""

from __future__ import annotations

from typing import Any

from benchmark.grid import Cell, resolve_cell
from benchmark.registries import METHODS, load_builtins

# per-method settings that make a smoke cell valid (backbone family, public data)
SMOKE_OVERRIDES: dict[str, dict[str, Any]] = {}


def smoke_cell(method: str = "fedavg_simclr", *, rounds: int = 1, clients: int = 2, participation: float = 1.0,
               partition: Any = "iid", seed: int = 0, tasks: Any = None, method_params: dict | None = None,
               **extra: Any) -> Cell:
    """2 clients × 1 round × batch 16 on digits with a micro backbone; kNN and a 1-epoch probe by default."""
    load_builtins()
    values: dict[str, Any] = {
        "dataset": "digits", "backbone": {"name": "resnet_micro", "width": 4}, "method": {"name": method},
        "partition": partition, "fl": {"num_clients": clients, "participation": participation, "rounds": rounds,
                                       "local_epochs": 1},
        "seed": seed, "tasks": tasks if tasks is not None else ["knn", {"name": "linear_probe", "epochs": 1}],
    }
    canonical = METHODS.canonical(method)
    for key, value in smoke_method_settings(canonical).items():
        if key == "method":
            values["method"] = {**values["method"], **value}
        else:
            values[key] = value
    values["method"] = {**values["method"], **(method_params or {})}
    values.update(extra)
    common = {"batch_size": 16}
    return resolve_cell(values, common)


def smoke_method_settings(name: str) -> dict[str, Any]:
    """A method may declare ``smoke_settings`` (cell fields it needs in a tiny run: backbone, public split, ...)."""
    cls = METHODS.get(name)
    return dict(getattr(cls, "smoke_settings", {}) or {})
