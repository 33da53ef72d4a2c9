"""run_tasks: a task whose evaluation diverges costs only its own score, with the reason in the
record."""

from __future__ import annotations

from pathlib import Path

from benchmark.api import Diverged
from benchmark.engine.runner import run_cell
from tests.helpers import smoke_cell


def test_a_diverging_task_is_recorded_and_the_cell_keeps_its_other_scores(
    tmp_path: Path, monkeypatch
) -> None:
    from tasks.probes import knn

    calls = []

    def boom(self, encoder, ctx):
        calls.append(1)
        raise Diverged("non-finite loss at step 3")

    monkeypatch.setattr(knn.KNN, "run", boom)
    cell = smoke_cell("no_pretrain", tasks=["knn", {"name": "linear_probe", "epochs": 1}])
    rec = run_cell(cell, tmp_path)
    assert rec.status == "ok" and [s.task for s in rec.scores] == ["linear_probe"]
    ((label, reason),) = rec.task_failures.items()
    assert label.startswith("knn-") and "non-finite" in reason
    # resuming (record removed, scores/ kept) neither retries the failed task nor loses its reason
    from benchmark.runroot.rundir import RunDir

    RunDir.of(cell, tmp_path).record_path.unlink()
    again = run_cell(cell, tmp_path)
    assert calls == [1] and again.task_failures == rec.task_failures
