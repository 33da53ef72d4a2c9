"""Workers die with their run (issue 57): ``run`` killed with SIGKILL leaves no process behind
within seconds (a worker's parent-death signal, and its watch on its parent), its cells stay
resumable, and the next ``run`` takes over the claims the dead workers left, says so, says from
which round it resumes, and completes the cells. Before, an orphaned worker finished its cell and
then hung in a pipe read until killed by hand, and the re-run reported the cell as skipped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, cli_env

pytestmark = pytest.mark.slow

# two cells (seeds), so that --workers 2 runs them in worker processes; rounds enough that the kill
# lands while they train: the kill follows the first round checkpoint within a poll (0.1 s), and
# five more rounds and the kNN evaluation are left (about 3 s on a quiet 2-core machine, 0.6 s a
# round: 6 rounds, not 12, since every round past the kill is trained again by the rerun and
# proves nothing more)
GRID = """\
name: worker_death
description: two tiny cells on 8x8 digits, killed mid-run
base:
  dataset: {name: digits, size: 8}
  backbone: {name: resnet_micro, width: 4}
  partition: iid
  fl: {num_clients: 2, participation: 1.0, rounds: 6, local_epochs: 1}
  tasks: [knn]
method_common: {batch_size: 32}
axes:
  method: [fedavg_simclr]
  seed: [0, 1]
"""


def _group(pgid: int) -> list[int]:
    """Live (non-zombie) processes of the process group ``pgid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in "ZX":
            out.append(int(stat.parent.name))
    return out


def _run(grid: Path, root: Path, log: Path, workers: int) -> subprocess.Popen:
    """``run`` with its output in ``log`` (a file, not a pipe: an orphaned worker holding the pipe
    would keep a reader waiting, which is how the bug looked)."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "benchmark", "run", "--grid", str(grid), "--root", str(root)]
            + ["--no-wandb", "--workers", str(workers)],
            cwd=REPO,
            env=cli_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: every worker it starts is in it
        )


def test_sigkill_of_run_leaves_no_worker_and_the_rerun_takes_the_cells_over(
    tmp_path: Path,
) -> None:
    grid, root = tmp_path / "worker_death.yaml", tmp_path / "runs"
    grid.write_text(GRID)
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    proc = _run(grid, root, first, workers=2)  # the cells in worker processes: what is killed
    deadline = time.monotonic() + 600
    while not list(root.glob("**/ckpt/round_*.pt")):
        assert proc.poll() is None, first.read_text()
        assert time.monotonic() < deadline, "no round checkpoint in 600 s"
        time.sleep(0.1)
    workers = [p for p in _group(proc.pid) if p != proc.pid]
    assert workers, "the cells were expected to run in worker processes"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = _group(proc.pid)
    for _ in range(50):  # a few seconds
        if not left:
            break
        time.sleep(0.2)
        left = _group(proc.pid)
    for pid in left:  # never leave them to the rest of the suite
        subprocess.run(["kill", "-9", str(pid)], check=False)
    assert not left, f"processes of the killed run still alive: {left}"
    assert not list(root.glob("*/*/record.json")), "a cell finished after its run was killed"

    # the rerun computes the two cells itself (--workers 1): taking over a dead runner's claim and
    # resuming from its checkpoint is the same code (execute_cell) in a worker or in the run process,
    # and two more worker processes would only import torch and the registry again
    rerun = _run(grid, root, second, workers=1)
    rerun.wait(timeout=900)
    out = second.read_text()
    assert rerun.returncode == 0, out
    assert "took over the claim of a runner that is gone" in out and "is dead" in out, out
    assert "resuming from the checkpoint of round" in out, out
    assert "done: 2" in out, out
