"""Runs that survive anything: SIGKILL at a random point, then a restart; two runners on one grid
and root."""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import records_of, run_cli

pytestmark = pytest.mark.slow


def _run_args(grid: Path, root: Path, *more: str) -> list[str]:
    return ["run", "--grid", str(grid), "--root", str(root), "--no-wandb", "--device", "cpu", *more]


# The kill test runs its cells in the ``run`` process itself (``--workers 1``): the SIGKILL then
# lands in the cell's own process at a random point of its training or writing, and the two runs
# start two processes instead of six (each worker imports torch and the registry, seconds of CPU).
# A run killed while its cells are in worker processes is test_worker_death.py's; a runner with
# worker processes racing one without, the test below.
IN_PROCESS = ("--workers", "1")


def _events(cells: list[Any], root: Path) -> dict[str, list[dict[str, Any]]]:
    from benchmark.runroot.rundir import RunDir

    out = {}
    for c in cells:
        log = RunDir.of(c, root).attempts_path
        out[c.cell_id] = (
            [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        )
    return out


def test_sigkill_at_a_random_point_then_rerun_equals_an_uninterrupted_run(
    tiny_grid: Any, tiny_reference: Any, tmp_path: Path
) -> None:
    grid, cells = tiny_grid
    root = tmp_path / "runs"
    delay = random.Random().uniform(0.0, 6.0)
    proc = run_cli(*_run_args(grid, root, *IN_PROCESS))
    deadline = time.monotonic() + 600
    from benchmark.runroot.rundir import RunDir

    # a round checkpoint on disk
    while not any(RunDir.of(c, root).pretrain.checkpoint_rounds() for c in cells):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = sum(1 for c in cells if RunDir.of(c, root).done)
    print(f"killed {delay:.2f}s after the first checkpoint; {before}/{len(cells)} records then")
    rerun = run_cli(*_run_args(grid, root, *IN_PROCESS))
    out, _ = rerun.communicate(timeout=900)
    assert rerun.returncode == 0, out
    assert records_of(cells, root) == tiny_reference
    assert not list(root.rglob("claim.json")) and not list(root.rglob("lock.json"))
    # the restart resumed: no pre-training round ran more often than in the two runs together allow,
    # and each pre-training's rounds completed once in total unless the kill hit between a
    # checkpoint and its log line
    rounds = Counter(
        (e["pretrain_key"], e["round"])
        for evs in _events(cells, root).values()
        for e in evs
        if e["event"] == "round"
    )
    assert all(n == 1 for n in rounds.values()), rounds


def test_two_runners_on_one_grid_and_root_run_each_cell_exactly_once(
    tiny_grid: Any, tiny_reference: Any, tmp_path: Path
) -> None:
    grid, cells = tiny_grid
    root = tmp_path / "runs"
    # one runner with worker processes (one per core), one that runs its cells itself: three
    # claimants race for the 4 cells (four processes started, not six)
    procs = [run_cli(*_run_args(grid, root)), run_cli(*_run_args(grid, root, *IN_PROCESS))]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert records_of(cells, root) == tiny_reference
    events = _events(cells, root)
    for cell in cells:
        starts = [e for e in events[cell.cell_id] if e["event"] == "start"]
        assert len(starts) == 1, (cell.cell_id, events[cell.cell_id])
    # cells that share a pre-training (same pretrain_key) trained it once between them
    rounds = Counter(
        (e["pretrain_key"], e["round"])
        for evs in events.values()
        for e in evs
        if e["event"] == "round"
    )
    assert sorted(rounds) == sorted(
        {(c.pretrain_key, r) for c in cells for r in range(1, c.fl.rounds + 1)}
    )
    assert set(rounds.values()) == {1}, rounds
    runners = {e["pid"] for evs in events.values() for e in evs if e["event"] == "start"}
    print(f"cells run by {len(runners)} runner(s): " + ", ".join(map(str, sorted(runners))))
