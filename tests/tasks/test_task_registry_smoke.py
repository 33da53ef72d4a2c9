"""Every registered task runs inside a real cell and returns scores bound to a card: parametrised
over the TASKS registry, so a new task is smoke-tested automatically once it names its smallest
configuration here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmark.contracts.registries import TASKS, load_builtins
from benchmark.engine.runner import run_cell
from tests.helpers import TASK_SMOKE as SMOKE
from tests.helpers import smoke_cell

load_builtins()


def test_every_registered_task_has_a_smoke_entry() -> None:
    missing = sorted(set(TASKS.names()) - set(SMOKE))
    assert not missing, f"add the smallest config of {missing} to SMOKE in {Path(__file__).name}"


@pytest.mark.parametrize("task", sorted(k for k, v in SMOKE.items() if v is not None))
def test_task_runs_in_a_cell_and_scores_under_its_card(task: str, tmp_path: Path) -> None:
    method, params = SMOKE[task]
    rec = run_cell(smoke_cell(method, tasks=[{"name": task, **params}]), tmp_path)
    assert rec.status == "ok"
    (s,) = [s for s in rec.scores if s.task == task]
    cls = TASKS.get(task)
    assert s.main_metric == cls.main_metric and s.higher_is_better == cls.higher_is_better
    assert math.isfinite(s.main) and s.card.card_id and s.card.name
    assert s.card.card_id == cls(cls.Config(**params)).card().card_id
