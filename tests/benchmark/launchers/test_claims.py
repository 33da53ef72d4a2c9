"""Claim files: exclusive, heartbeated, broken only when stale; execute_cell honours them and keeps
failures."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmark.runroot import locks


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: two OMP threads per process crawl on a busy 2-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _fake_claim(
    path: Path, *, pid: int, host: str | None = None, owner: str | None = None, age_s: float = 0.0
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {"host": host or socket.gethostname(), "pid": pid, "token": "t0", "owner": owner}
        )
    )
    t = time.time() - age_s
    os.utime(path, (t, t))


def test_claim_is_exclusive_until_released(tmp_path: Path) -> None:
    path = tmp_path / "claim.json"
    first = locks.try_claim(path)
    assert first is not None
    assert locks.try_claim(path) is None  # held by a live Claim in this very process: not stale
    info = locks.read_claim(path)
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    first.release()
    assert not path.exists()
    second = locks.try_claim(path)
    assert second is not None
    second.release()


def test_release_never_removes_someone_elses_claim(tmp_path: Path) -> None:
    path = tmp_path / "claim.json"
    mine = locks.try_claim(path)
    path.unlink()  # our claim was judged stale and broken by another runner, who now holds it
    _fake_claim(path, pid=os.getppid())
    mine.release()
    assert path.exists() and locks.read_claim(path)["token"] == "t0"


@pytest.mark.parametrize("case", ["dead_pid", "old_heartbeat", "same_owner", "own_pid_leftover"])
def test_stale_claims_are_broken(tmp_path: Path, case: str) -> None:
    path = tmp_path / "claim.json"
    owner = None
    if case == "dead_pid":
        _fake_claim(path, pid=_dead_pid())
    elif case == "old_heartbeat":
        _fake_claim(path, pid=12345, host="another-node", age_s=1000)
    elif case == "same_owner":
        _fake_claim(path, pid=12345, host="another-node", owner="submitit:77_3")
        owner = "submitit:77_3"
    else:
        _fake_claim(path, pid=os.getpid())
    assert locks.stale_reason(locks.read_claim(path), timeout_s=300, owner=owner)
    claim = locks.try_claim(path, owner=owner, timeout_s=300)
    assert claim is not None and locks.read_claim(path)["token"] == claim.token
    claim.release()


@pytest.mark.parametrize("case", ["live_pid", "fresh_other_host", "other_owner", "half_written"])
def test_live_claims_are_respected(tmp_path: Path, case: str) -> None:
    path = tmp_path / "claim.json"
    if case == "live_pid":
        _fake_claim(path, pid=os.getppid())
    elif case == "fresh_other_host":
        _fake_claim(path, pid=12345, host="another-node", age_s=10)
    elif case == "other_owner":
        _fake_claim(path, pid=12345, host="another-node", owner="submitit:77_4")
    else:  # created with O_EXCL, content not written yet: judged by its heartbeat only
        path.write_text("")
    assert locks.try_claim(path, owner="submitit:77_3", timeout_s=300) is None
    assert locks.live_claim(path, timeout_s=300) is not None


def test_heartbeat_keeps_a_long_claim_fresh(tmp_path: Path) -> None:
    path = tmp_path / "claim.json"
    claim = locks.try_claim(path, heartbeat_s=0.05)
    old = time.time() - 100
    os.utime(path, (old, old))
    time.sleep(0.3)
    assert locks.read_claim(path)["age_s"] < 5
    claim.release()


def _race(path: str, barrier: mp.Barrier, out: mp.Queue) -> None:
    barrier.wait()
    claim = locks.try_claim(Path(path), timeout_s=300)
    out.put(os.getpid() if claim is not None else None)
    time.sleep(0.5)  # keep holding while the others try
    if claim is not None:
        claim.release()


def test_racing_runners_break_a_stale_claim_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "claim.json"
    _fake_claim(path, pid=_dead_pid())
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(path), barrier, out)) for _ in range(6)]
    for p in procs:
        p.start()
    winners = [w for w in (out.get(timeout=60) for _ in procs) if w is not None]
    for p in procs:
        p.join(timeout=60)
    assert len(winners) == 1


def test_clear_stale_removes_only_a_stale_claim(tmp_path: Path) -> None:
    path = tmp_path / "lock.json"
    assert locks.clear_stale(path) is None  # nothing there
    _fake_claim(path, pid=os.getppid())
    assert locks.clear_stale(path, timeout_s=300) is None and path.exists()  # live: kept
    _fake_claim(path, pid=_dead_pid())
    assert "is dead" in locks.clear_stale(path, timeout_s=300) and not path.exists()


def test_a_finished_pretraining_s_lock_left_by_a_killed_runner_is_cleared(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A runner killed between the pre-training's final state and releasing its lock left the lock
    for good (its worker dies with it): the cell that finds the pre-training done clears it."""
    from benchmark.launchers.execute import execute_cell
    from benchmark.launchers.options import RunOptions
    from benchmark.runroot.rundir import RunDir
    from tests.cell_cache import cached_run
    from tests.helpers import smoke_cell

    cell = smoke_cell()
    done = tmp_path / "done"
    cached_run(cell, done, tmp_path_factory)
    rd = RunDir.of(cell, done)
    assert rd.pretrain.pretrained
    rd.record_path.unlink()  # the cell's record not yet written when the runner was killed
    _fake_claim(rd.pretrain.lock, pid=_dead_pid())
    outcome = execute_cell(cell, done, RunOptions(device="cpu"))
    assert outcome.status == "done" and rd.done, outcome
    assert not rd.pretrain.lock.exists()


def test_execute_cell_skips_a_cell_claimed_by_a_live_runner(tmp_path: Path) -> None:
    from benchmark.launchers.execute import execute_cell
    from benchmark.launchers.options import RunOptions
    from benchmark.runroot.rundir import RunDir
    from tests.helpers import smoke_cell

    cell = smoke_cell()
    rd = RunDir.of(cell, tmp_path)
    _fake_claim(rd.claim_path, pid=os.getppid())
    outcome = execute_cell(cell, tmp_path, RunOptions(device="cpu"))
    assert outcome.status == "claimed" and "claimed by" in outcome.error
    assert not rd.cell_file.exists()  # nothing was run
    assert rd.status().state == "running"


def test_failures_are_kept_with_their_reason_and_the_grid_goes_on(
    tmp_path: Path, monkeypatch
) -> None:
    from benchmark.engine import runner
    from benchmark.engine.stages import Evaluation
    from benchmark.launchers.local import LocalLauncher
    from benchmark.launchers.options import RunOptions
    from benchmark.runroot.rundir import RunDir
    from benchmark.runroot.status_counts import grid_status
    from tests.helpers import smoke_cell

    oom, boom, ok = smoke_cell(seed=0), smoke_cell(seed=1), smoke_cell(seed=2)
    real = runner._run

    def fake_run(cell, *args, **kwargs):
        if cell.cell_id == oom.cell_id:
            raise MemoryError("CUDA out of memory (simulated)")
        if cell.cell_id == boom.cell_id:
            raise RuntimeError("boom")
        return real(cell, *args, **kwargs)

    monkeypatch.setattr(runner, "_run", fake_run)
    monkeypatch.setattr(runner, "evaluate", lambda *a, **k: Evaluation())  # pre-training only: fast
    outcomes = list(
        LocalLauncher(options=RunOptions(device="cpu"), workers=1).launch([oom, boom, ok], tmp_path)
    )
    assert [o.status for o in outcomes] == ["failed", "failed", "done"]
    assert "MemoryError" in outcomes[0].error and "boom" in outcomes[1].error
    for cell, word in ((oom, "MemoryError: CUDA out of memory"), (boom, "RuntimeError: boom")):
        rd = RunDir.of(cell, tmp_path)
        assert word in json.loads(rd.error_path.read_text())["reason"] and word in rd.error_reason()
        assert not rd.claim_path.exists() and not rd.pretrain.lock.exists()
    text = grid_status([oom, boom, ok], tmp_path)
    assert (
        "reason: MemoryError: CUDA out of memory (simulated)" in text
        and "reason: RuntimeError: boom" in text
    )
    assert "done: 1" in text and "failed: 2" in text


def test_a_nan_loss_is_a_diverged_record_and_the_grid_goes_on(tmp_path: Path, monkeypatch) -> None:
    from benchmark.api import Diverged
    from benchmark.engine import runner, stages
    from benchmark.launchers.local import LocalLauncher
    from benchmark.launchers.options import RunOptions
    from benchmark.runroot.status_counts import grid_status
    from tests.helpers import smoke_cell

    nan, ok = smoke_cell(seed=3), smoke_cell(seed=4)
    real = stages.simulate

    def fake_simulate(method, clients, settings, work_dir, **kw):
        if settings.seed == nan.seed:
            raise Diverged("client 1: loss is nan at round 1")
        return real(method, clients, settings, work_dir, **kw)

    monkeypatch.setattr(stages, "simulate", fake_simulate)
    monkeypatch.setattr(runner, "evaluate", lambda *a, **k: stages.Evaluation())
    outcomes = list(
        LocalLauncher(options=RunOptions(device="cpu"), workers=1).launch([nan, ok], tmp_path)
    )
    assert [o.status for o in outcomes] == ["diverged", "done"]
    assert "loss is nan" in outcomes[0].error
    text = grid_status([nan, ok], tmp_path)
    assert (
        "diverged: 1" in text
        and "done: 1" in text
        and "reason: client 1: loss is nan at round 1" in text
    )


def test_retry_failed_reruns_only_failed_cells_and_leaves_no_claims(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from benchmark.cli import main
    from benchmark.engine import runner
    from benchmark.grids.expand import expand_grid, load_grid
    from benchmark.runroot.rundir import RunDir

    grid = tmp_path / "one.yaml"
    grid.write_text(
        "name: one\nbase: {dataset: {name: digits, size: 8}, backbone: {name: resnet_micro, width: 4},"
        " partition: iid, fl: {num_clients: 2, rounds: 1}, tasks: [knn]}\n"
        "method_common: {batch_size: 32}\naxes: {method: [fedavg_simclr], seed: [0]}\n"
    )
    [cell] = expand_grid(load_grid(str(grid)))
    root = tmp_path / "runs"
    args = [
        "run",
        "--grid",
        str(grid),
        "--root",
        str(root),
        "--no-wandb",
        "--device",
        "cpu",
        "--workers",
        "1",
    ]
    real = runner._run
    monkeypatch.setattr(
        runner, "_run", lambda *a, **k: (_ for _ in ()).throw(MemoryError("simulated OOM"))
    )
    assert main(args) == 1  # a failed cell: exit 1
    assert "failed: 1" in capsys.readouterr().out
    # a failed cell: status follows the run's exit-code policy
    assert main(["status", "--grid", str(grid), "--root", str(root)]) == 1
    assert "reason: MemoryError: simulated OOM" in capsys.readouterr().out
    monkeypatch.setattr(runner, "_run", real)
    # without --retry-failed the failed cell stays failed (and the exit code says so)
    assert main(args) == 1
    rd = RunDir.of(cell, root)
    assert "0 to run" in capsys.readouterr().out and rd.failed
    assert main([*args, "--retry-failed"]) == 0
    assert "done: 1" in capsys.readouterr().out
    assert rd.done and not rd.error_path.exists() and not rd.claim_path.exists()


def test_execute_cell_pins_intra_op_threads_on_cpu_and_restores_them(
    tmp_path: Path, monkeypatch
) -> None:
    import torch

    from benchmark.engine import runner
    from benchmark.launchers.execute import execute_cell
    from benchmark.launchers.options import RunOptions
    from tests.helpers import smoke_cell

    seen = []

    def fake_run_cell(cell, root, **kw):
        seen.append(torch.get_num_threads())
        # as if interrupted by stop_after_round

    monkeypatch.setattr(runner, "run_cell", fake_run_cell)
    monkeypatch.setenv("FSSL_CELL_THREADS", "1")
    torch.set_num_threads(2)
    try:
        assert (
            execute_cell(smoke_cell(seed=5), tmp_path, RunOptions(device="cpu")).status
            == "interrupted"
        )
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)


def test_pretraining_lock_is_released_once_final_pt_exists_before_the_tasks(
    tmp_path: Path, monkeypatch
) -> None:
    """Sibling cells share one pre-training; they must not wait for this cell's tasks: the
    launcher's pre-training lock is gone as soon as the pre-trained state is saved, while the cell's
    own claim is held until its record exists."""
    from benchmark.launchers.execute import execute_cell
    from benchmark.launchers.options import RunOptions
    from benchmark.runroot.rundir import RunDir
    from tasks.probes import knn
    from tests.helpers import smoke_cell

    cell = smoke_cell(seed=11, tasks=["knn"])
    rd = RunDir.of(cell, tmp_path)
    seen = []
    real_run = knn.KNN.run

    def spy(self, encoder, ctx):
        seen.append((rd.pretrain.pretrained, rd.pretrain.lock.exists(), rd.claim_path.exists()))
        return real_run(self, encoder, ctx)

    monkeypatch.setattr(knn.KNN, "run", spy)
    assert execute_cell(cell, tmp_path, RunOptions(device="cpu")).status == "done"
    assert seen == [(True, False, True)]
