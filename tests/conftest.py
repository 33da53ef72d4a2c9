"""Test-wide settings: offline by construction (docs/design.md §7), small thread pools, artefacts
folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmark.portable import mode as portable
from tests import xdist_plan

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ["WANDB_MODE"] = "disabled"
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    # a calibration the developer made of this machine (doctor --calibrate) must not change what
    # `plan` and `run --dry-run` print in a test: an empty calibration folder of the tests' own
    monkeypatch.setenv("FSSL_CALIBRATION_DIR", str(tmp_path_factory.getbasetemp() / "calibration"))
    monkeypatch.delenv("FSSL_CALIBRATION", raising=False)


# the variables that fix this process's kernel mode (benchmark.portable.mode): a test that changes
# them for good puts every later in-process cell in the wrong mode (95 failures far from the cause),
# so the test that leaves them changed fails itself, and they are put back
_KERNEL_VARS = (portable.MARK, *portable.PORTABLE_ENV)
_KERNEL_ENV_AT_START = {k: os.environ.get(k) for k in _KERNEL_VARS}


@pytest.fixture(autouse=True)
def _kernel_mode_kept() -> Iterator[None]:
    yield
    now = {k: os.environ.get(k) for k in _KERNEL_VARS}
    if now != _KERNEL_ENV_AT_START:
        for key, value in _KERNEL_ENV_AT_START.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        pytest.fail(f"this test left the kernel-mode variables changed: {now}")


def worker_threads() -> int | None:
    """Under pytest-xdist (the README's ``-n 2``): the cores this process may use, divided between
    the workers; None outside xdist (torch's default)."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not os.environ.get("PYTEST_XDIST_WORKER") or not workers:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, int(workers)))


@pytest.fixture(scope="session", autouse=True)
def _worker_threads() -> Iterator[None]:
    """Each xdist worker computes on its share of the cores. torch's default is every core per
    process: two workers on two cores then run four intra-op threads, and every parallel operator
    waits at its barrier for a thread the other worker holds off the core (what made a tiny cell
    20-30x slower on a busy 2-core machine, tests/integration/conftest.py). In-process cells of the
    tests then compute as ``run`` computes a CPU cell: one intra-op thread
    (RunOptions.cell_threads)."""
    threads = worker_threads()
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(min(threads, before))
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session", autouse=True)
def _builtins() -> None:
    from benchmark.contracts.registries import load_builtins

    load_builtins()


@pytest.fixture()
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: the plan the controller spreads the tests by (tests/xdist_plan.py)."""
    xdist_plan.write_plan(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (pyproject's addopts): the planned scheduling of tests/xdist_plan.py
    (xdist's own reads group marks from node ids, which pytest 9 no longer lets it change)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return xdist_plan.make_scheduler(config, log)
