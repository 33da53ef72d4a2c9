"""The README's ``-n 2`` (tests/xdist_plan.py, wired in by tests/conftest.py): a module-scoped fixture
is built once, on one worker, the ``slow`` tests start first, and each worker runs one intra-op
thread per share of the cores. Checked on a small suite of its own run by two xdist workers with
this repository's hooks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

CONFTEST = """\
from tests.conftest import _worker_threads, pytest_collection_modifyitems, pytest_xdist_make_scheduler
"""
INI = """\
[pytest]
addopts = -p no:cacheprovider --dist loadgroup
markers =
    slow: starts first
"""
SUITE = """\
import os

import pytest


def _log(line):
    with open(os.environ["PLAN_LOG"], "a") as f:
        f.write(line + "\\n")


@pytest.fixture(autouse=True)
def _started(request):
    import torch

    _log(f"start {request.node.name} {os.environ['PYTEST_XDIST_WORKER']} {torch.get_num_threads()}")


@pytest.fixture(scope="module")
def shared():
    _log(f"fixture {os.environ['PYTEST_XDIST_WORKER']}")


@pytest.mark.parametrize("i", range(4))
def test_shares(shared, i):
    pass


@pytest.mark.parametrize("i", range(6))
def test_plain(i):
    pass


@pytest.mark.slow
def test_slow_but_collected_last():
    pass
"""


# a pytest of its own with two xdist workers (three processes): slow, so it starts first, not at
# the tail of the run where it would keep one worker busy while the other has finished
@pytest.mark.slow
def test_two_workers_build_a_module_fixture_once_and_start_slow_tests_first(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "pytest.ini").write_text(INI)
    (suite / "test_suite.py").write_text(SUITE)
    log = tmp_path / "log.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "PLAN_LOG": str(log),
    }
    for key in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS"):
        env.pop(key, None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-q", "--basetemp", str(tmp_path / "bt")],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = log.read_text().splitlines()
    assert len([line for line in lines if line.startswith("fixture ")]) == 1, lines
    starts = [line.split()[1:] for line in lines if line.startswith("start ")]
    assert len(starts) == 11, lines
    assert len({w for name, w, _ in starts if name.startswith("test_shares")}) == 1, lines
    # the slow unit is the first one handed out: the first test its worker starts (the two
    # workers start at their own pace, so the log's order across workers says nothing)
    (slow_worker,) = {w for name, w, _ in starts if name == "test_slow_but_collected_last"}
    first_on = next(name for name, w, _ in starts if w == slow_worker)
    assert first_on == "test_slow_but_collected_last", lines
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert {int(t) for _, _, t in starts} == {max(1, (cores or 1) // 2)}, lines


@pytest.mark.parametrize("workers, cores, expected", [("2", 2, 1), ("2", 16, 8), ("4", 2, 1)])
def test_a_worker_takes_its_share_of_the_cores(
    monkeypatch: pytest.MonkeyPatch, workers: str, cores: int, expected: int
) -> None:
    from tests.conftest import worker_threads

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert worker_threads() == expected
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert worker_threads() is None  # without xdist, torch's default
