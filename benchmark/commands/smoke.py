"""The smoke cell: the tiny CPU cell (digits, micro backbone, 2 clients, batch 16) that
``check-method``, the registry smoke tests and a plugin's own state tests run a method on.

It lives here (not in tests/) because ``check-method`` needs it outside the test suite;
``benchmark.commands.check_method`` and ``tests/helpers.py`` re-export it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from benchmark.contracts.cell import Cell
from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.grids.expand import resolve_cell

# per-method settings that make a smoke cell valid (backbone family, public data), for methods that
# cannot declare ``smoke_settings`` themselves
SMOKE_OVERRIDES: dict[str, dict[str, Any]] = {}


def smoke_method_settings(name: str) -> dict[str, Any]:
    """A method may declare ``smoke_settings`` (cell fields it needs in a tiny run: backbone, public
    split, ...)."""
    cls = METHODS.get(name)
    settings = dict(SMOKE_OVERRIDES.get(METHODS.canonical(name), {}))
    settings.update(dict(cls.smoke_settings))
    return settings


def smoke_cell(
    method: str = "fedavg_simclr",
    *,
    rounds: int = 1,
    clients: int = 2,
    participation: float = 1.0,
    partition: Any = "iid",
    seed: int = 0,
    tasks: Any = None,
    method_params: dict | None = None,
    **extra: Any,
) -> Cell:
    """2 clients × 1 round × batch 16 on digits with a micro backbone; kNN and a 1-epoch probe by
    default."""
    load_builtins()
    values: dict[str, Any] = {
        "dataset": "digits",
        "backbone": {"name": "resnet_micro", "width": 4},
        "method": {"name": method},
        "partition": partition,
        "fl": {
            "num_clients": clients,
            "participation": participation,
            "rounds": rounds,
            "local_epochs": 1,
        },
        "seed": seed,
        "tasks": tasks if tasks is not None else ["knn", {"name": "linear_probe", "epochs": 1}],
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


@contextmanager
def cell_threads() -> Iterator[None]:
    """torch's intra-op threads pinned to a cell's count for the block, restored after. On a busy
    machine torch's default (one per core) spends most of a tiny model's step waiting for its
    threads: check-method took 136 s on 2 loaded cores, 4 s with one thread."""
    import torch

    from benchmark.launchers.options import RunOptions

    threads, before = RunOptions(device="cpu").cell_threads(), torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


__all__ = ["SMOKE_OVERRIDES", "cell_threads", "smoke_cell", "smoke_method_settings"]
