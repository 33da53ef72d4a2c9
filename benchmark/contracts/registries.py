"""The project's registries. Components register next to their definitions; ``load_builtins``
imports the packages that hold the built-in ones, declared like a plugin's: as entry points."""

from __future__ import annotations

import importlib
from functools import cache
from importlib import metadata
from pathlib import Path
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

# Cards are data the project publishes (tasks/cards/*.json); ``accept`` bounds a re-evaluation by the
# published card of the same name, through the loader registered here as "project".
PUBLISHED_CARDS: Registry[Any] = Registry("published card loader")

# The built-in components are found the way plugins are: through entry points. pyproject.toml
# declares the packages that hold them in the group BUILTINS_GROUP, one entry per kind; importing a
# package registers every component of its kind (methods/ and benchmark/data/partitioners/ import
# each of their modules, tasks/ its torch-free registration module). BUILTIN_MODULES is the same
# table in code, for a source checkout (tests/benchmark/test_builtins.py holds the two equal):
# nothing reads pyproject.toml at run time. The harness names no module inside methods/, tasks/ or
# leaderboard/ (tests/benchmark/test_layers.py holds it to this, reading by-name imports too).
BUILTINS_GROUP = "fssl_bench.builtins"
DISTRIBUTION = "fssl-bench"
BUILTIN_MODULES: dict[str, str] = {
    "partitioners": "benchmark.data.partitioners",
    "public-splits": "benchmark.data.public",
    "datasets": "benchmark.data.datasets",
    "hub-datasets": "benchmark.data.hub_datasets",
    "backbones": "benchmark.building_blocks.backbones",
    "vit-backbones": "benchmark.building_blocks.backbones_vit",
    "methods": "methods",
    "tasks": "tasks",
    "launchers": "benchmark.launchers",
}
# the entry of that group whose package registers the built-in tasks, torch-free (with their data
# declarations, which ``run`` reads before it imports torch)
TASKS_ENTRY = "tasks"
# this module's path inside the distribution: where the installed copy is the one imported
_HERE = "benchmark/contracts/registries.py"
_loaded = False


@cache
def builtin_modules() -> dict[str, str]:
    """Entry name -> the package that registers those built-in components: the installed
    distribution's entry points where the code running is that installed copy (a wheel), else
    ``BUILTIN_MODULES`` (a source checkout, installed in editable mode or not: an editable
    install's metadata is as old as its last ``pip install``, and a checkout put first on the path
    is not the installed copy)."""
    installed = _installed_declaration()
    # in name order, as a wheel's metadata lists them (the order of imports is the same either way)
    return dict(sorted((BUILTIN_MODULES if installed is None else installed).items()))


def _installed_declaration() -> dict[str, str] | None:
    """The group as the installed distribution declares it, or None when the code imported is not
    that distribution's installed copy (or there is none)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    own = Path(str(dist.locate_file(_HERE)))
    if not own.is_file() or own.resolve() != Path(__file__).resolve():
        return None
    found = {ep.name: ep.value for ep in dist.entry_points if ep.group == BUILTINS_GROUP}
    if TASKS_ENTRY not in found:
        raise RuntimeError(
            f"the installed {DISTRIBUTION} declares no built-in components (entry-point group "
            f"{BUILTINS_GROUP}); reinstall it"
        )
    return found


def load_builtins() -> None:
    """Import every built-in component module once, so that each registers its components."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in builtin_modules().values():
        importlib.import_module(module)


# a name asked of these before the built-ins were imported (a plugin's own tests: no_pretrain) finds
# them: the first unknown name imports the built-ins once (issue 57)
for _registry in (METHODS, TASKS, PARTITIONERS, DATASETS, BACKBONES, PUBLIC_SPLITS, LAUNCHERS):
    _registry.load_missing = load_builtins


def load_task_registrations() -> None:
    """Only the built-in tasks' registrations, without torch (what ``run`` checks before it
    imports torch)."""
    importlib.import_module(builtin_modules()[TASKS_ENTRY])
