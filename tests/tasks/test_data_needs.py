"""The torch-free declaration of task data (tasks/data_needs.py) agrees with the tasks' own
``required_datasets``.

The fast missing-data check of ``run`` reads only the declaration; the full preflight reads the
tasks. If the two drift, a user is told about a dataset late or not at all, so they are compared on
every task spec of every grid."""

from __future__ import annotations

import pytest

import tasks.builtin  # noqa: F401  (registers every task)
from benchmark.api import from_mapping
from benchmark.contracts.registries import TASKS
from benchmark.grids.expand import GRIDS_DIR, load_grid
from tasks import data_needs

NEEDY = [n for n in TASKS.names() if hasattr(TASKS.get(n), "required_datasets")]


def test_every_task_that_reads_extra_data_is_declared_under_each_of_its_names() -> None:
    assert {"transfer", "transfer_native", "finetune", "coco_detection"} <= set(NEEDY)
    names = set(NEEDY) | {alias for alias, canon in TASKS.aliases().items() if canon in NEEDY}
    assert set(data_needs.NEEDS) == names, (
        "declare the task in tasks/data_needs.py (or drop a stale entry)"
    )


def _grid_specs() -> list[tuple[str, str, dict]]:
    out = []
    for path in sorted(GRIDS_DIR.glob("*.yaml")):
        grid = load_grid(path)
        out += [
            (path.stem, name, params)
            for name, params in data_needs.task_specs([dict(grid.base), dict(grid.axes)])
            if name in data_needs.NEEDS
        ]
    return out


@pytest.mark.parametrize("name", sorted(data_needs.NEEDS))
def test_declaration_matches_the_task_on_its_defaults(name: str) -> None:
    cls = TASKS.get(name)
    assert data_needs.extra_datasets(name, {}) == tuple(
        cls.required_datasets(from_mapping(cls.Config, {}))
    )


def test_declaration_matches_the_task_on_every_grid_spec() -> None:
    specs = _grid_specs()
    assert {name for _, name, _ in specs} >= {
        "transfer",
        "transfer_native",
        "finetune",
        "coco_detection",
    }
    for grid, name, params in specs:
        cls = TASKS.get(name)
        declared = data_needs.extra_datasets(name, params)
        assert declared == tuple(cls.required_datasets(from_mapping(cls.Config, params))), (
            grid,
            name,
            params,
        )


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"target": "cifar10"}, ("cifar10",)),
        ({"dataset": "shapes_coco"}, ()),
        ({"coco_root": "/data/coco"}, ()),
    ],
)
def test_parameters_change_what_is_read(params: dict, expected: tuple) -> None:
    name = "transfer" if "target" in params else "coco_detection"
    cls = TASKS.get(name)
    assert (
        data_needs.extra_datasets(name, params)
        == expected
        == tuple(cls.required_datasets(from_mapping(cls.Config, params)))
    )


def test_task_specs_finds_nested_task_lists() -> None:
    tree = [
        {"tasks": ["knn", {"name": "transfer", "target": "stl10"}]},
        {
            "method": [
                {"name": "m", "with": {"tasks": [{"name": "detection", "dataset": "coco2017"}]}}
            ]
        },
    ]
    assert list(data_needs.task_specs(tree)) == [
        ("knn", {}),
        ("transfer", {"target": "stl10"}),
        ("detection", {"dataset": "coco2017"}),
    ]


def test_the_declaration_imports_without_torch() -> None:
    """``run`` reads it before anything imports torch: the ``tasks`` package must not pull the tasks
    in."""
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys; import tasks.data_needs; assert 'torch' not in sys.modules, sorted(sys.modules)[:5]"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2]
    )
    assert out.returncode == 0, out.stderr
