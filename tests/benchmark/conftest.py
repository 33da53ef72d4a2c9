"""Fixtures of the hostile-input tests (tests/hostile.py holds their helpers)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from benchmark.commands.check_method import smoke_cell
from benchmark.records.files import read_record
from benchmark.records.schema import ResultRecord
from tests.cell_cache import cached_run


@pytest.fixture(scope="module")
def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's own copy of one smoke cell, run once per session (tests/cell_cache.py)."""
    root = tmp_path_factory.mktemp("runs")
    return cached_run(smoke_cell("fedavg_simclr", tasks=["knn"]), root, tmp_path_factory)


@pytest.fixture(scope="module")
def honest(run_root: Path) -> ResultRecord:
    (path,) = run_root.rglob("record.json")
    return read_record(path)


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's folder, with TMPDIR inside it: leftover temporary folders show in its snapshot."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return tmp_path
