"""How the README's ``-n 2`` spreads the tests over pytest-xdist's workers (tests/conftest.py wires it
in; ``--dist loadgroup`` in pyproject's addopts turns it on).

xdist's own ``loadgroup`` sends the tests marked ``xdist_group`` to one worker by appending the
group's name to each test's node id; since pytest 9 a node id is no longer that attribute, so the
marks went unseen and every module-scoped fixture (a bundle, a site, the portable smoke grid) was
built once per worker. Here the controller groups by a plan the workers write while they collect:

- the tests of a file that share a module-, class- or package-scoped fixture are one unit of work
  (one worker builds the fixture once);
- the units holding a ``slow`` test go first, then the file groups (a fixture worth sharing), then
  every other test one by one in collection order, so the last tests to start are short ones and
  neither worker idles through a long tail.

The plan lives beside the workers' temporary folders (the session's base folder, which every worker
of this session and nothing else shares), written once, whole (a rename), before the worker reports
its collection; the controller reads it when every worker has collected.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

PLAN_NAME = "xdist-plan.json"
_SHARED_SCOPES = {"module", "class", "package"}


def plan_of(items: Sequence[pytest.Item]) -> dict[str, Any]:
    """``groups``: node id -> its file, for the tests that share a wider-than-function fixture;
    ``first``: the node ids marked ``slow``."""
    groups: dict[str, str] = {}
    first: list[str] = []
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is not None:
            defs = (d for ds in info.name2fixturedefs.values() for d in ds)
            if any(d.scope in _SHARED_SCOPES for d in defs):
                groups[item.nodeid] = item.nodeid.split("::")[0]
        if item.get_closest_marker("slow") is not None:
            first.append(item.nodeid)
    return {"groups": groups, "first": first}


def _session_base(config: pytest.Config) -> Path | None:
    """The folder this xdist session's workers share: the controller's base temporary folder,
    whose ``popen-<worker>`` children are the workers' own (checked by name: a pytest started
    inside a test inherits PYTEST_XDIST_WORKER but has a base folder of its own)."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return None
    base = factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return base
    return base.parent if base.name == f"popen-{worker}" else None


def write_plan(config: pytest.Config, items: Sequence[pytest.Item]) -> None:
    """On an xdist worker of a ``loadgroup`` session: the plan, unless another worker wrote it
    (they collect the same tests)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "loadgroup", False):
        return
    base = _session_base(config)
    if base is None or (base / PLAN_NAME).exists():
        return
    partial = base / f"{PLAN_NAME}.{os.getpid()}"
    partial.write_text(json.dumps(plan_of(items)))
    partial.replace(base / PLAN_NAME)


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class PlannedScheduling(LoadScopeScheduling):
        """LoadScopeScheduling with units from the workers' plan and its slow units first."""

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            self.groups: dict[str, str] = {}
            self.first: set[str] = set()

        def _split_scope(self, nodeid: str) -> str:
            return self.groups.get(nodeid, nodeid)

        def _read_plan(self) -> None:
            base = _session_base(self.config)
            path = None if base is None else base / PLAN_NAME
            if path is None or not path.is_file():
                return  # no plan: every test its own unit, as xdist's load does
            plan = json.loads(path.read_text())
            self.groups, self.first = dict(plan["groups"]), set(plan["first"])

        def schedule(self) -> None:
            assert self.collection_is_completed
            if self.collection is not None:  # a node came up later: as the base class does
                for node in self.nodes:
                    self._reschedule(node)
                return
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = list(next(iter(self.registered_collections.values())))
            if not self.collection:
                return
            self._read_plan()
            units: dict[str, dict[str, bool]] = {}
            for nodeid in self.collection:
                units.setdefault(self._split_scope(nodeid), {})[nodeid] = False

            # sorted() is stable: the slow units, then those sharing a fixture, then the others,
            # each in collection order
            def rank(scope: str) -> int:
                if any(n in self.first for n in units[scope]):
                    return 0
                return 1 if len(units[scope]) > 1 else 2

            for scope in sorted(units, key=rank):
                self.workqueue[scope] = units[scope]
            for _ in range(len(self.nodes) - len(self.workqueue)):  # more workers than work
                node, _ = self.assigned_work.popitem()
                node.shutdown()
            for node in self.nodes:
                self._assign_work_unit(node)
            for node in self.nodes:
                self._reschedule(node)
            if not self.workqueue:
                for node in self.nodes:
                    node.shutdown()

    return PlannedScheduling(config, log)
