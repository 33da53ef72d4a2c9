"""Issue 57: a plugin goes through a track's validation sweep with one command. ``run --grid
quickstart_tune --add-method M`` gives M the sweep every built-in's batch size and learning rate
were chosen by (B in {16, 64} x each learning rate at 1x and 10x its default, from M's own
defaults), ``python -m benchmark.commands.tuning --add-method M`` chooses with the built-ins' rule
and prints the run line for the track, and ``submit`` says when a plugin's settings are none of
the sweep's variants (FedSimSiam at its paper's B = 512)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmark.commands.tuning import TUNED_KEYS, track_command
from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.grids.expand import (
    expand_grid,
    load_grid,
    parse_added_method,
    sweep_variants,
    with_methods,
)
from benchmark.submission.checks import sweep_notes

PLUGIN_SRC = Path(__file__).resolve().parents[1] / "plugins" / "api_2_2" / "src"


@pytest.fixture(scope="module")
def plugin() -> Iterator[Any]:
    """FedMoCo (plugin API 2.2; lr 1e-2, B = 64 by default), registered as its entry point would."""
    load_builtins()
    sys.path.insert(0, str(PLUGIN_SRC))
    module = importlib.import_module("fssl_moco_api22.method")
    METHODS._items[module.FedMoCo.name] = module.FedMoCo
    try:
        yield module.FedMoCo
    finally:
        METHODS._items.pop(module.FedMoCo.name, None)
        sys.path.remove(str(PLUGIN_SRC))


def _tuned(entry: Any) -> tuple:
    return tuple(sorted((k, v) for k, v in dict(entry).items() if k in TUNED_KEYS))


def test_the_sweep_is_the_one_every_built_in_was_chosen_by() -> None:
    """The grid's own entries for each built-in are exactly what the sweep gives it from its
    defaults: a plugin meets the same chooser on the same variants."""
    load_builtins()
    grid = load_grid("quickstart_tune")
    by_method: dict[str, set[tuple]] = {}
    for entry in grid.axes["method"]:
        if isinstance(entry, str):  # a reference point (no_pretrain, ...): nothing tuned
            continue
        by_method.setdefault(entry["name"], set()).add(_tuned(entry))
    assert len(by_method) >= 8
    at_defaults = []
    for name, entries in by_method.items():
        rates = {
            k: min(dict(e)[k] for e in entries) for k in dict(next(iter(entries))) if "lr" in k
        }
        assert {_tuned(v) for v in sweep_variants(grid.sweep, name, rates)} == entries, name
        if {_tuned(v) for v in sweep_variants(grid.sweep, name)} == entries:
            at_defaults.append(name)
    # from the method's own defaults for all but Orchestra (its grid sweeps the paper's grid value)
    assert sorted(set(by_method) - set(at_defaults)) == ["orchestra"]


def test_add_method_on_the_tune_grid_runs_the_plugin_through_the_sweep(plugin: Any) -> None:
    grid = load_grid("quickstart_tune")
    before = expand_grid(grid)
    cells = [
        c for c in expand_grid(with_methods(grid, [plugin.name])) if c.method.name == plugin.name
    ]
    variants = {(c.method.params["batch_size"], c.method.params["lr"]) for c in cells}
    assert variants == {(16, 0.01), (16, 0.1), (64, 0.01), (64, 0.1)}
    # every variant on every partition and seed of the grid, on validation data
    assert len(cells) == 4 * len({(c.partition.name, c.seed) for c in before})
    assert all(c.dataset.params["eval_split"] == "validation" for c in cells)
    # the track's grid adds it once, at its defaults or at the chosen settings
    track = [c for c in expand_grid(with_methods(load_grid("quickstart"), [plugin.name]))]
    assert {c.method.params["batch_size"] for c in track if c.method.name == plugin.name} == {64}
    chosen = track_command("quickstart_tune", plugin.name, {"batch_size": 16, "lr": 0.1})
    assert chosen == (
        "python -m benchmark run --grid quickstart --add-method 'fedmoco_api22:batch_size=16,lr=0.1'"
    )
    added = chosen.split("--add-method ")[1].strip("'")
    assert parse_added_method(added) == {"name": plugin.name, "batch_size": 16, "lr": 0.1}
    at = expand_grid(with_methods(load_grid("quickstart"), [added]))
    assert {
        (c.method.params["batch_size"], c.method.params["lr"])
        for c in at
        if c.method.name == plugin.name
    } == {(16, 0.1)}


def _record(method: str, params: dict[str, Any], plugin: bool = True) -> Any:
    return SimpleNamespace(
        method=method,
        env=SimpleNamespace(plugins={f"method:{method}": {}} if plugin else {}),
        cell={"method": {"name": method, "params": params}},
    )


def test_submit_says_when_a_plugins_settings_were_not_chosen_by_the_sweep(plugin: Any) -> None:
    track = SimpleNamespace(grid="quickstart")
    untuned = sweep_notes([_record(plugin.name, {"batch_size": 512, "lr": 0.01})], track)
    assert len(untuned) == 1 and "not chosen by the track's validation sweep" in untuned[0]
    assert "--grid quickstart_tune --add-method fedmoco_api22" in untuned[0]
    assert not sweep_notes([_record(plugin.name, {"batch_size": 64, "lr": 0.1})], track)
    # built-ins were chosen by it; a track without a sweep grid has nothing to say
    assert not sweep_notes([_record("fedavg_simclr", {"batch_size": 512}, plugin=False)], track)
    assert not sweep_notes([_record(plugin.name, {"batch_size": 512})], SimpleNamespace(grid=None))
