"""Each task registers once (tasks/registration.py): name, aliases, class and the datasets it reads
besides the cell's own, torch-free.

The fast missing-data check of ``run`` reads the declaration with a grid's raw task parameters; the
full preflight reads the same declaration with the expanded cell's resolved parameters (defaults
filled in). If the two readings differ, a user is told about a dataset late or not at all, so they
are compared on the defaults and on every task spec of every grid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.api import from_mapping
from benchmark.contracts.registries import TASKS, load_builtins
from benchmark.contracts.task import task_datasets, tasks_with_data
from benchmark.core.config import config_dict
from benchmark.grids.expand import GRIDS_DIR, load_grid, task_specs

load_builtins()
READERS = ["transfer", "transfer_native", "finetune", "coco_detection"]


def resolved(name: str, params: dict) -> dict:
    """The task's parameters as an expanded cell holds them (every default filled in)."""
    cls = TASKS.get(name)
    return config_dict(from_mapping(cls.Config, params))


def test_the_tasks_that_read_other_data_declare_it() -> None:
    assert tasks_with_data() == sorted(READERS)


@pytest.mark.parametrize("name", READERS)
def test_raw_and_resolved_parameters_read_the_same_data_on_the_defaults(name: str) -> None:
    assert task_datasets(name, {}) == task_datasets(name, resolved(name, {}))


def test_raw_and_resolved_parameters_read_the_same_data_on_every_grid_spec() -> None:
    specs = [
        (path.stem, name, params)
        for path in sorted(GRIDS_DIR.glob("*.yaml"))
        for grid in [load_grid(path)]
        for name, params in task_specs([dict(grid.base), dict(grid.axes)])
        if name in TASKS and TASKS.canonical(name) in READERS
    ]
    assert {TASKS.canonical(name) for _, name, _ in specs} >= set(READERS)
    for grid, name, params in specs:
        assert task_datasets(name, params) == task_datasets(name, resolved(name, params)), (
            grid,
            name,
            params,
        )


@pytest.mark.parametrize(
    "name, params, expected",
    [
        ("transfer", {}, ("stl10",)),
        ("transfer_linear", {"target": "cifar10"}, ("cifar10",)),
        ("transfer_native", {"target": "digits"}, ("digits",)),
        ("finetune", {}, ()),
        ("fine_tune", {"target": "digits"}, ("digits",)),
        ("coco_detection", {}, ("coco2017",)),
        ("detection", {"dataset": "shapes_coco"}, ()),
        ("coco_detection", {"coco_root": "/data/coco"}, ()),
        ("knn", {}, ()),
        ("no_such_task", {"target": "x"}, ()),
    ],
)
def test_parameters_and_aliases_change_what_is_read(name: str, params: dict, expected: tuple):
    assert task_datasets(name, params) == expected


def test_task_specs_finds_nested_task_lists() -> None:
    tree = [
        {"tasks": ["knn", {"name": "transfer", "target": "stl10"}]},
        {
            "method": [
                {"name": "m", "with": {"tasks": [{"name": "detection", "dataset": "coco2017"}]}}
            ]
        },
    ]
    assert list(task_specs(tree)) == [
        ("knn", {}),
        ("transfer", {"target": "stl10"}),
        ("detection", {"dataset": "coco2017"}),
    ]


def test_the_registrations_import_without_torch() -> None:
    """``run`` reads them before anything imports torch, through the torch-free part of
    ``benchmark.api``; ``TASKS.get`` imports a task's module only when it is used."""
    code = (
        "import sys; from benchmark.contracts.registries import TASKS, load_task_registrations; "
        "load_task_registrations(); from benchmark.contracts.task import task_datasets; "
        "assert task_datasets('transfer', {}) == ('stl10',); assert 'knn' in TASKS.names(); "
        "import tasks.cards; assert 'torch' not in sys.modules, 'torch imported'"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2]
    )
    assert out.returncode == 0, out.stderr
