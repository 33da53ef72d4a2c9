"""Issue 47: ``new-task NAME --plugin`` scaffolds a working task package, like new-method's; its
generated tests pass with the task registered as its entry point would register it."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.contracts.registries import TASKS, load_builtins


def test_new_task_writes_a_package_whose_tests_pass(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "nmi"
    assert main(["new-task", "centroid_probe", "--plugin", "--out", str(pkg)]) == 0
    assert f"pip install -e '{pkg}[test]'" in capsys.readouterr().out
    assert (
        'centroid_probe = "fssl_centroid_probe.task:CentroidProbe"'
        in (pkg / "pyproject.toml").read_text()
    )
    assert '[project.entry-points."fssl_bench.tasks"]' in (pkg / "pyproject.toml").read_text()
    # what pip install + the entry point do, without pip
    monkeypatch.syspath_prepend(str(pkg / "src"))
    module = importlib.import_module("fssl_centroid_probe.task")
    load_builtins()
    monkeypatch.setitem(TASKS._items, "centroid_probe", module.CentroidProbe)
    spec = importlib.util.spec_from_file_location("t_cp", pkg / "tests" / "test_centroid_probe.py")
    tests = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "t_cp", tests)
    spec.loader.exec_module(tests)
    ran = [name for name in dir(tests) if name.startswith("test_")]
    for name in ran:
        getattr(tests, name)()
    assert len(ran) == 5
    sys.modules.pop("fssl_centroid_probe.task", None)
    sys.modules.pop("fssl_centroid_probe", None)


def test_new_task_refuses_without_plugin_and_registered_names(tmp_path: Path, capsys) -> None:
    assert main(["new-task", "fresh_task", "--out", str(tmp_path / "a")]) == 2
    assert "docs/adding-a-task.md" in capsys.readouterr().err
    assert main(["new-task", "knn", "--plugin", "--out", str(tmp_path / "b")]) == 2
    assert "already registered" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
