"""The project's registries. Components register next to their definitions; ``load_builtins``
imports them all."""

from __future__ import annotations

import importlib
from typing import Any

from benchmark.contracts.method import MethodBase, explain_refusal
from benchmark.core.registry import Registry

METHODS: Registry[Any] = Registry(
    "method", entry_point_group="fssl_bench.methods", base=MethodBase, explain=explain_refusal
)
TASKS: Registry[Any] = Registry("task", entry_point_group="fssl_bench.tasks")
PARTITIONERS: Registry[Any] = Registry("partitioner", entry_point_group="fssl_bench.partitioners")
DATASETS: Registry[Any] = Registry("dataset")
BACKBONES: Registry[Any] = Registry("backbone")
PUBLIC_SPLITS: Registry[Any] = Registry("public split")
LAUNCHERS: Registry[Any] = Registry("launcher")

_BUILTIN_MODULES = (
    "benchmark.data.partitioners",
    "benchmark.data.public",
    "benchmark.data.datasets",
    "benchmark.data.hub_datasets",
    "benchmark.toolkit.backbones",
    "benchmark.toolkit.backbones_vit",
    "methods",
    "tasks.builtin",
    "benchmark.launchers",
)
_loaded = False

# The only places where the harness reaches into the plugin packages (methods/, tasks/) and the site
# (leaderboard/): named here, loaded by name, so that benchmark/ never imports them
# (tests/benchmark/test_layers.py holds it to this).
PLUGIN_POINTS: dict[str, str] = {
    # torch-free: datasets a task reads besides its cell's own
    "task_data_needs": "tasks.data_needs",
    # `run --site DIR` builds the leaderboard after the grid
    "site_builder": "leaderboard.site:build_site",
    # accept bounds a re-evaluation by the project's published card of the same name
    "published_card": "tasks.cards:load_card",
}


def plugin_point(name: str) -> Any:
    """The module (``pkg.mod``) or attribute (``pkg.mod:attr``) a declared plugin point names,
    imported on use."""
    module, _, attr = PLUGIN_POINTS[name].partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attr) if attr else loaded


def load_builtins() -> None:
    """Import every built-in component module once, so that each decorator registers its class."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
