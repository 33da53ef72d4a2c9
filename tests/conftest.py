"""Test-wide settings: offline by construction (docs/design.md §7), small thread pools, artefacts
folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmark.portable import mode as portable

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


@pytest.fixture(scope="session", autouse=True)
def _builtins() -> None:
    from benchmark.contracts.registries import load_builtins

    load_builtins()


@pytest.fixture()
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


_SHARED_SCOPES = {"module", "class", "package"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (the README's ``-n 2``; ``--dist loadgroup`` is in pyproject's addopts):
    the tests of a file that share a module- or class-scoped fixture (a bundle, a site, a grid run)
    go to one worker, so the fixture is built once rather than once per worker; every other test
    is balanced one by one. Runs before xdist's own hook, which reads the ``xdist_group`` marks."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        defs = (d for ds in info.name2fixturedefs.values() for d in ds)
        if any(d.scope in _SHARED_SCOPES for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
