"""The project's registries. Components register next to their definitions; ``load_builtins``
imports the modules that hold the built-in ones, which pyproject.toml declares like a plugin's."""

from __future__ import annotations

import importlib
from functools import cache
from importlib import metadata
from typing import Any

from benchmark.contracts.method import MethodBase, explain_refusal
from benchmark.core.paths import REPO
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

# The built-in components register themselves like plugins: pyproject.toml declares the modules that
# hold them in the entry-point group BUILTINS_GROUP, and ``load_builtins`` imports them. The harness
# names no module of methods/, tasks/ or leaderboard/ (tests/benchmark/test_layers.py holds it to
# this, reading by-name imports too).
BUILTINS_GROUP = "fssl_bench.builtins"
DISTRIBUTION = "fssl-bench"
# the entry of that group whose module registers the built-in tasks, torch-free (with their data
# declarations, which ``run`` reads before it imports torch)
TASKS_ENTRY = "tasks"
_loaded = False


@cache
def builtin_modules() -> dict[str, str]:
    """Entry name -> the module that registers those built-in components, as pyproject.toml
    declares them: read from the source checkout's pyproject.toml when there is one (an editable
    install's metadata is as old as its last ``pip install``), else from the installed
    distribution's entry points."""
    declared = _checkout_declaration()
    if declared is not None:
        return declared
    found = {
        ep.name: ep.value
        for ep in metadata.entry_points(group=BUILTINS_GROUP)
        if getattr(ep.dist, "name", None) == DISTRIBUTION
    }
    if TASKS_ENTRY not in found:
        raise RuntimeError(
            f"the installed {DISTRIBUTION} declares no built-in components (entry-point group "
            f"{BUILTINS_GROUP}): its metadata predates them; reinstall it (pip install -e .)"
        )
    return found


def _checkout_declaration() -> dict[str, str] | None:
    """The group as the source checkout's pyproject.toml declares it; None outside a checkout (an
    installed wheel) or where Python cannot read TOML (3.10)."""
    pyproject = REPO / "pyproject.toml"
    try:
        import tomllib
    except ImportError:  # Python 3.10: the installed metadata is the only reader
        return None
    if not pyproject.is_file():
        return None
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    if project.get("name") != DISTRIBUTION:
        return None
    return dict(project["entry-points"][BUILTINS_GROUP])


def load_builtins() -> None:
    """Import every built-in component module once, so that each registers its components."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in builtin_modules().values():
        importlib.import_module(module)


def load_task_registrations() -> None:
    """Only the built-in tasks' registrations, without torch (what ``run`` checks before it
    imports torch)."""
    importlib.import_module(builtin_modules()[TASKS_ENTRY])
