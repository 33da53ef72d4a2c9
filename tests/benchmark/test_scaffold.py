"""new-method: the scaffold is a working method whose generated tests and conformance check pass as
written."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.commands.new_method import ScaffoldError, render, write_scaffold

REPO = Path(__file__).resolve().parents[2]

# The generated module is imported in a subprocess (so the registry of this process never sees it):
# the folder it was generated into is appended to the ``methods`` package path, exactly where a real
# method file would live. Each selection of the generated tests given after the name (a JSON list of
# pytest arguments) is a pytest session of its own in that process, its output between two markers.
DRIVER = """
import json, sys, importlib
import methods
methods.__path__.append(sys.argv[1] + "/methods")
importlib.import_module("methods." + sys.argv[2])
from benchmark.grids.expand import expand_grid, load_grid
cells = expand_grid(load_grid(sys.argv[1] + "/benchmark/grids/" + sys.argv[2] + "_smoke.yaml"))
assert sorted(c.method.name for c in cells) == sorted([sys.argv[2], "fedavg_simclr", "no_pretrain"]), cells
import pytest
args = [sys.argv[1] + "/tests/methods/test_" + sys.argv[2] + ".py", "-q", "-p", "no:cacheprovider"]
for i, extra in enumerate(sys.argv[3:]):
    print(f"=== selection {i} ===", flush=True)
    code = pytest.main(args + json.loads(extra))
    print(f"=== selection {i} exit {int(code)} ===", flush=True)
"""


def _generated_tests(out: Path, name: str, *selections: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "-c", DRIVER, str(out), name, *map(json.dumps, selections)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


def _selection(proc: subprocess.CompletedProcess, i: int) -> tuple[int | None, str]:
    """(exit code, output) of the ``i``-th pytest session of a driver run."""
    found = re.search(
        rf"=== selection {i} ===\n(.*)=== selection {i} exit (\d+) ===", proc.stdout, re.DOTALL
    )
    return (int(found.group(2)), found.group(1)) if found else (None, proc.stdout + proc.stderr)


@pytest.fixture(scope="module")
def generated_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    """The scaffold's generated tests run once for the module's two tests, as two pytest sessions
    in one process: the tests without the ``slow`` mark, then the conformance test alone. The same
    selections as two processes would run, on the same generated files; one Python importing torch
    and the registry instead of two."""
    out = tmp_path_factory.mktemp("scaffold")
    write_scaffold("fedscaffold", out)
    return _generated_tests(out, "fedscaffold", ["-m", "not slow"], ["-k", "conformance"])


def test_cli_writes_the_three_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["new-method", "fedtoy", "--out", str(tmp_path)]) == 0
    for rel in (
        "methods/fedtoy.py",
        "tests/methods/test_fedtoy.py",
        "benchmark/grids/fedtoy_smoke.yaml",
    ):
        assert (tmp_path / rel).is_file(), rel
    text = (tmp_path / "methods/fedtoy.py").read_text()
    assert (
        '@METHODS.register("fedtoy")' in text
        and "class FedtoyConfig" in text
        and "TODO(fedtoy)" in text
    )
    assert "check-method fedtoy" in capsys.readouterr().out
    compile(text, "fedtoy.py", "exec")
    compile((tmp_path / "tests/methods/test_fedtoy.py").read_text(), "test_fedtoy.py", "exec")


def test_bad_names_and_overwrites_are_refused(tmp_path: Path) -> None:
    assert main(["new-method", "fedavg_simclr"]) == 2  # already registered
    assert main(["new-method", "Fed-Foo", "--out", str(tmp_path)]) == 2
    write_scaffold("fedbar", tmp_path)
    with pytest.raises(ScaffoldError, match="exist"):
        write_scaffold("fedbar", tmp_path)
    write_scaffold("fedbar", tmp_path, force=True)
    assert render("fed_bar").class_name == "FedBar"


@pytest.mark.slow
def test_generated_tests_pass(generated_run: subprocess.CompletedProcess) -> None:
    code, out = _selection(generated_run, 0)
    assert code == 0, out + generated_run.stderr
    assert "3 passed, 1 skipped" in out  # the placeholder spec test waits for its TODO


@pytest.mark.slow
def test_generated_method_passes_check_method(generated_run: subprocess.CompletedProcess) -> None:
    code, out = _selection(generated_run, 1)
    assert code == 0, out + generated_run.stderr
    assert "1 passed" in out


def _load_plugin(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> type:
    """What ``pip install`` + the entry point do, without pip: import the generated module, register
    its class."""
    import importlib.util
    import sys

    import tomllib

    from benchmark.contracts.registries import METHODS, load_builtins

    pkg = tmp_path / f"fssl-{name}"
    meta = tomllib.loads((pkg / "pyproject.toml").read_text())
    target = meta["project"]["entry-points"]["fssl_bench.methods"][name]
    module_name, _, attr = target.partition(":")
    spec = importlib.util.spec_from_file_location(
        module_name, pkg / "src" / f"fssl_{name}" / "method.py"
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, module_name, module)
    spec.loader.exec_module(module)
    load_builtins()
    monkeypatch.setitem(METHODS._items, name, getattr(module, attr))
    return getattr(module, attr)


def test_plugin_scaffold_is_an_installable_package_registered_by_its_entry_point(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    from benchmark.api import MethodBase
    from benchmark.cli import main

    assert main(["new-method", "fedplug", "--plugin", "--out", str(tmp_path / "fssl-fedplug")]) == 0
    assert f"pip install -e '{tmp_path / 'fssl-fedplug'}[test]'" in capsys.readouterr().out
    text = (tmp_path / "fssl-fedplug" / "src" / "fssl_fedplug" / "method.py").read_text()
    assert "METHODS.register" not in text  # registered by the entry point, never twice
    cls = _load_plugin(tmp_path, "fedplug", monkeypatch)
    assert issubclass(cls, MethodBase) and cls.name == "fedplug"
    from benchmark.commands.check_method import smoke_cell

    assert smoke_cell("fedplug", tasks=[]).method.name == "fedplug"


PROJECT_PACKAGES = ("benchmark", "methods", "tasks", "leaderboard")


def project_imports(source: str) -> set[str]:
    """Every module of this project that ``source`` imports, wherever the statement is (AST, not
    grep)."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import in a generated method"
            found.add(node.module or "")
    return {m for m in found if m.split(".")[0] in PROJECT_PACKAGES}


def test_plugin_method_imports_only_benchmark_api(tmp_path: Path) -> None:
    write_scaffold("fedplug", tmp_path / "fssl-fedplug", plugin=True)
    text = (tmp_path / "fssl-fedplug" / "src" / "fssl_fedplug" / "method.py").read_text()
    assert project_imports(text) == {"benchmark.api"}
    assert project_imports(
        "from methods._shared.nets import WorkingNets\nimport benchmark.api"
    ) == {
        "methods._shared.nets",
        "benchmark.api",
    }  # the checker sees what it must refuse


def test_plugin_package_has_tests_and_a_digits_smoke_grid(tmp_path: Path) -> None:
    import yaml

    write_scaffold("fedplug", tmp_path / "fssl-fedplug", plugin=True)
    pkg = tmp_path / "fssl-fedplug"
    tests = (pkg / "tests" / "test_fedplug.py").read_text()
    compile(tests, "test_fedplug.py", "exec")
    assert 'check_method("fedplug"' in tests
    # the generated tests run as generated: no test carries a decorator, and pytest is used for
    # nothing that could set a test aside (only raises / approx / fixture)
    tree = ast.parse(tests)
    assert not [
        f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.decorator_list
    ]
    assert {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "pytest"
    } <= {"raises", "approx", "fixture"}
    # expanded by the slow test below,
    grid = yaml.safe_load((pkg / "grids" / "fedplug_smoke.yaml").read_text())
    # where an installed fedplug resolves
    assert grid["axes"]["method"] == ["fedplug", "no_pretrain"]
    assert grid["base"]["dataset"]["name"] == "digits" and grid["base"]["fl"]["rounds"] == 1


def test_registered_names_are_refused_for_plugins_and_with_out(tmp_path: Path, capsys) -> None:
    assert main(["new-method", "fedavg_simclr", "--plugin", "--out", str(tmp_path)]) == 2
    assert main(["new-method", "no_pretrain", "--out", str(tmp_path)]) == 2
    assert "already registered" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.slow
def test_installed_plugin_scaffold_passes_check_method_and_its_own_tests(tmp_path: Path) -> None:
    """The package as a stranger gets it: pip-installed (into a temporary target, offline, no build
    isolation), found by a fresh process through its entry point only; ``check-method`` exits 0 and
    its generated tests pass."""
    assert main(["new-method", "fedplug", "--plugin", "--out", str(tmp_path / "fssl-fedplug")]) == 0
    site = tmp_path / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
            str(site),
            str(tmp_path / "fssl-fedplug"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert (
        "fedplug = fssl_fedplug.method:Fedplug"
        in next(site.glob("fssl_fedplug-*.dist-info")).joinpath("entry_points.txt").read_text()
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]),
        "WANDB_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    check = subprocess.run(
        [sys.executable, "-m", "benchmark", "check-method", "fedplug"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "fedplug: all checks passed" in check.stdout
    # it declares its traffic, and the declaration is the runner's count (not the None note)
    assert "PASS  declared_traffic" in check.stdout and "byte for byte" in check.stdout
    tests = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(tmp_path / "fssl-fedplug" / "tests"),
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert tests.returncode == 0 and "4 passed" in tests.stdout, tests.stdout + tests.stderr


# ---- issue 33, item 9 and 11: the plugin author's path ------------------------------------------
def test_a_smoke_grid_takes_each_methods_smoke_settings(tmp_path: Path) -> None:
    """``smoke: true``: orchestra's smoke_settings (50 global steps, 8 clusters) reach the grid's
    cells, an explicit grid param still wins; without the key a cell keeps its defaults."""
    from benchmark.grids.expand import expand_grid, load_grid

    text = """name: s
base: {dataset: digits, backbone: {name: resnet_micro, width: 4}, partition: iid,
       fl: {num_clients: 2, participation: 1.0, rounds: 1, local_epochs: 1}, tasks: [knn]}
axes:
  method: [orchestra, {name: orchestra, num_global_clusters: 4}]
"""
    (tmp_path / "plain.yaml").write_text(text)
    (tmp_path / "smoke.yaml").write_text(text + "smoke: true\n")
    plain_cells = expand_grid(load_grid(tmp_path / "plain.yaml"))
    plain = {c.method.params["num_global_clusters"] for c in plain_cells}
    cells = expand_grid(load_grid(tmp_path / "smoke.yaml"))
    assert {c.method.params["num_global_clusters"] for c in cells} == {8, 4} and 8 not in plain
    assert {c.method.params["global_steps"] for c in cells} == {50}


def test_the_scaffold_declares_its_traffic(tmp_path: Path, monkeypatch) -> None:
    """The generated method declares what it sends (plugin API 2.5): its whole model up and down,
    so accept derives its rows' traffic instead of badging them "traffic not derived"."""
    from benchmark.api import ServerTensors, TensorShape, TrafficContext
    from benchmark.engine.traffic_sum import declares_traffic

    write_scaffold("fedplug", tmp_path / "fssl-fedplug", plugin=True)
    cls = _load_plugin(tmp_path, "fedplug", monkeypatch)
    assert declares_traffic(object.__new__(cls))
    tensors = ServerTensors(
        {"encoder.w": TensorShape((3, 4), 4), "projector.b": TensorShape((5,), 4)},
        {"not.sent": TensorShape((7,), 8)},
    )
    sent = object.__new__(cls).declared_traffic(tensors, TrafficContext(1, 2, 3, 1, 10))
    assert (sent.up, sent.down) == (68, 68)


def test_the_plugin_smoke_grid_runs_small_heads(tmp_path: Path) -> None:
    import yaml

    write_scaffold("fedplug", tmp_path / "fssl-fedplug", plugin=True, class_name="FedPlug")
    pkg = tmp_path / "fssl-fedplug"
    assert yaml.safe_load((pkg / "grids" / "fedplug_smoke.yaml").read_text())["smoke"] is True
    method = (pkg / "src" / "fssl_fedplug" / "method.py").read_text()
    assert 'smoke_settings: ClassVar[dict] = {"method": {"proj_dim": 16}}' in method
    assert "class FedPlug(MethodBase)" in method
    tests = (pkg / "tests" / "test_fedplug.py").read_text()
    assert project_imports(tests) == {"benchmark.api"}  # the stable surface only
    assert 'fedplug = "fssl_fedplug.method:FedPlug"' in (pkg / "pyproject.toml").read_text()


def test_out_is_the_package_folder_itself(tmp_path: Path, capsys) -> None:
    """Issue 47: ``--out DIR`` wrote ``DIR/fssl-NAME/``; the package is DIR itself, whatever its
    name, with a .gitignore for what setuptools leaves there when it builds in place."""
    from benchmark.cli import main

    assert main(["new-method", "fedplug", "--plugin", "--out", str(tmp_path / "mine")]) == 0
    assert (tmp_path / "mine" / "pyproject.toml").is_file()
    assert (tmp_path / "mine" / "src" / "fssl_fedplug" / "method.py").is_file()
    assert not (tmp_path / "mine" / "fssl-fedplug").exists()
    assert f"pip install -e '{tmp_path / 'mine'}[test]'" in capsys.readouterr().out
    ignored = (tmp_path / "mine" / ".gitignore").read_text().split()
    assert {"build/", "dist/", "*.egg-info/"} <= set(ignored)
    with pytest.raises(ScaffoldError, match="CamelCase"):
        write_scaffold("fedplug2", tmp_path / "fssl-fedplug2", plugin=True, class_name="fed plug")
