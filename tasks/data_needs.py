"""Datasets a task reads besides its cell's own, declared without importing torch.

``python -m benchmark run`` checks a grid's data before it imports torch (so that a run on a machine
without the data stops in well under a second). The cell datasets are known from the grid; the
*task* datasets (transfer targets, fine-tuning targets, COCO for detection) depend on task
parameters whose meaning lives in the task. This module states that meaning from the raw grid
parameters, torch-free, for every task that reads extra data.

Each task keeps its own ``required_datasets(cfg)`` (the full preflight calls it with the resolved
config); ``tests/tasks/test_data_needs.py`` checks the two agree on the defaults and on every task
spec of every grid, and that every task with ``required_datasets`` (and each of its aliases) is
declared here, so the two cannot drift apart.

Only the standard library (the ``tasks`` package imports nothing on its own), so the fast path
imports it through the harness's declared plugin point
``benchmark.contracts.registries.PLUGIN_POINTS["task_data_needs"]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any


def _target(default: str | None) -> Callable[[Mapping[str, Any]], tuple[str, ...]]:
    def needs(params: Mapping[str, Any]) -> tuple[str, ...]:
        target = params.get("target", default)
        return (target,) if target else ()

    return needs


def _coco(params: Mapping[str, Any]) -> tuple[str, ...]:
    # COCO 2017 under the data root, unless an explicit COCO root is given or the embedded shapes
    # are used
    return (
        ("coco2017",)
        if params.get("dataset", "coco2017") == "coco2017" and not params.get("coco_root")
        else ()
    )


# task name (canonical or alias, as a grid may spell it) -> datasets it reads, from the task's raw
# parameters
NEEDS: dict[str, Callable[[Mapping[str, Any]], tuple[str, ...]]] = {
    "transfer": _target("stl10"),
    "transfer_linear": _target("stl10"),
    "transfer_native": _target("stl10"),
    "finetune": _target(None),
    "fine_tune": _target(None),
    "finetune_fedmae": _target(None),
    "coco_detection": _coco,
    "detection": _coco,
}


def task_specs(tree: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every task spec (name, params) under any ``tasks`` list of a grid's base or axes, however
    deeply nested."""
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            if key == "tasks" and isinstance(value, list):
                for item in value:
                    if isinstance(item, str):
                        yield item, {}
                    elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
                        yield item["name"], {k: v for k, v in item.items() if k != "name"}
            else:
                yield from task_specs(value)
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from task_specs(item)


def extra_datasets(name: str, params: Mapping[str, Any]) -> tuple[str, ...]:
    """The datasets task ``name`` reads with these raw parameters besides the cell's own (() if
    none)."""
    needs = NEEDS.get(name)
    return needs(params) if needs else ()
