"""A submitit job that times out is requeued by submitit and resumes its cell from the latest round
checkpoint."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import records_of

pytestmark = pytest.mark.slow
submitit = pytest.importorskip("submitit")

from benchmark.launchers.options import RunOptions
from benchmark.launchers.submitit import CellJob, SubmititLauncher
from tests.integration.conftest import REPO
from tests.integration.requeue_job import TimesOutAfterRoundOne


def test_timed_out_job_is_requeued_and_resumes_from_its_checkpoint(
    tiny_grid: Any, tiny_reference: Any, tmp_path: Path, monkeypatch
) -> None:
    from benchmark.runroot.rundir import RunDir

    _, cells = tiny_grid
    cell = cells[0]
    root = tmp_path / "runs"
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    launcher = SubmititLauncher(
        cluster="local",
        folder=str(tmp_path / "submitit"),
        timeout_min=5,
        max_num_timeout=2,
        options=RunOptions(device="cpu"),
        poll_s=0.5,
        job_class=TimesOutAfterRoundOne,
    )
    [outcome] = list(launcher.launch([cell], root, grid="tiny_launch"))
    logs = "\n".join(p.read_text() for p in sorted((tmp_path / "submitit").rglob("*.out")))
    logs += "\n".join(p.read_text() for p in sorted((tmp_path / "submitit").rglob("*.err")))
    assert outcome.status == "done", (outcome, logs)
    assert (
        "this job is timed-out" in logs
        and "Requeued job" in logs
        and "(1 remaining timeouts)" in logs
    ), logs
    assert "attempt 1" in logs
    events = [json.loads(x) for x in RunDir.of(cell, root).attempts_path.read_text().splitlines()]
    starts = [e for e in events if e["event"] == "start"]
    rounds = [(e["pid"], e["round"]) for e in events if e["event"] == "round"]
    assert len(starts) == 2 and starts[0]["pid"] != starts[1]["pid"]  # two attempts, two processes
    assert starts[0]["owner"] == starts[1]["owner"] is not None  # one job id across the requeue
    # round 1 ran in the first attempt only; the requeued attempt resumed at round 2
    assert [r for _, r in rounds] == [1, 2, 3]
    assert rounds[0][0] == starts[0]["pid"] and {p for p, _ in rounds[1:]} == {starts[1]["pid"]}
    assert records_of([cell], root) == {cell.cell_id: tiny_reference[cell.cell_id]}


def test_checkpoint_resubmits_the_same_cell(tiny_grid: Any) -> None:
    _, cells = tiny_grid
    job = CellJob("/nonexistent", RunOptions(device="cpu"))
    delayed = job.checkpoint(cells[0])
    assert isinstance(delayed, submitit.helpers.DelayedSubmission)
    assert delayed.function is job and delayed.args == (cells[0],) and job.attempt == 1
