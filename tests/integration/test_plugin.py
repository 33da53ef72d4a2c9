"""An out-of-tree method, with no change to this project: pip-installed from tests/plugins/, found
through the ``fssl_bench.methods`` entry point, listed, run in a grid, submitted, and shown on the
built leaderboard.

A broken package (tests/plugins/fssl_broken_plugin: its entry point is in the same group, its module
raises ImportError) is installed next to it: it breaks only what names it.

The packages are installed with ``pip install --target`` into ``tmp_path`` (a wheel build with the
environment's setuptools, no network, no build isolation), so the real environment is never touched
and pytest's tmp_path clean-up removes it. Every project command runs in a subprocess whose
``PYTHONPATH`` holds that target first, so ``importlib.metadata`` finds the package's
``.dist-info/entry_points.txt`` exactly as it would after a normal ``pip install``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "tests" / "plugins" / "fssl_toy_plugin"
BROKEN = REPO / "tests" / "plugins" / "fssl_broken_plugin"

GRID = """
name: plugin_smoke
description: "the out-of-tree toy_plugin on digits"
base:
  dataset: digits
  backbone: {name: resnet_micro, width: 4}
  partition: iid
  fl: {num_clients: 2, participation: 1.0, rounds: 1, local_epochs: 1}
  tasks: [knn]
axes:
  method: [toy_plugin]
  seed: [0]
"""


def _run(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
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
            str(target),
            str(PLUGIN),
            str(BROKEN),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path_factory.mktemp("build"),
    )
    if proc.returncode != 0:
        pytest.fail(f"pip install of the plugins failed:\n{proc.stdout}\n{proc.stderr}")
    for dist in ("fssl_toy_plugin", "fssl_broken_plugin"):
        assert list(target.glob(f"{dist}-*.dist-info/entry_points.txt")), (
            f"pip wrote no entry points for {dist}"
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(target), str(REPO), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env.update(
        WANDB_MODE="disabled",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


@pytest.fixture(scope="module")
def listed(
    plugin_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> subprocess.CompletedProcess:
    """``list methods`` with both plugins installed, run once for the module's two tests: the same
    command in the same environment prints the same listing and warnings, and each test reads its
    part of it (one Python process importing torch and the registry instead of two)."""
    return _run(["-m", "benchmark", "list", "methods"], plugin_env, tmp_path_factory.mktemp("list"))


@pytest.mark.slow
def test_out_of_tree_method_end_to_end(
    plugin_env: dict[str, str], listed: subprocess.CompletedProcess, tmp_path: Path
) -> None:
    # nothing in the project knows the plugin: it lives only in the pip target on PYTHONPATH
    assert not any(
        "toy_plugin" in p.read_text(encoding="utf-8") for p in (REPO / "methods").glob("*.py")
    )
    assert "toy_plugin" not in (REPO / "benchmark" / "contracts" / "registries.py").read_text(
        encoding="utf-8"
    )

    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:1] == ["toy_plugin"] for line in listed.stdout.splitlines()), (
        listed.stdout
    )

    grid = tmp_path / "plugin_grid.yaml"
    grid.write_text(GRID, encoding="utf-8")
    root = tmp_path / "runs"
    ran = _run(
        [
            "-m",
            "benchmark",
            "run",
            "--grid",
            str(grid),
            "--root",
            str(root),
            "--no-wandb",
            "--device",
            "cpu",
        ],
        plugin_env,
        tmp_path,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    records = sorted(root.glob("toy_plugin/*/record.json"))
    assert len(records) == 1, ran.stdout + ran.stderr
    record = json.loads(records[0].read_text())
    assert record["method"] == "toy_plugin" and record["status"] == "ok"
    assert record["env"]["runner"] == "fssl-bench"
    # the plugin's code is pinned: distribution, version and a digest of its source files
    prov = record["env"]["plugins"]["method:toy_plugin"]
    assert (prov["distribution"], prov["version"]) == ("fssl-toy-plugin", "0.1.0") and len(
        prov["source_digest"]
    ) == 64
    assert prov["module"] == "fssl_toy_plugin.method" and prov["files"] >= 2

    # the submission path sees it too: validated for the digits smoke track, bundled with provenance
    bundle = tmp_path / "bundle.tar.gz"
    sub = _run(
        [
            "-m",
            "benchmark",
            "submit",
            str(records[0]),
            "--track",
            "digits-smoke-knn",
            "--out",
            str(bundle),
        ],
        plugin_env,
        tmp_path,
    )
    assert sub.returncode == 0, sub.stdout + sub.stderr
    assert bundle.exists()

    from leaderboard.site import build_site

    site = tmp_path / "site"
    index = build_site([root], site)
    assert index.exists()
    data = json.loads((site / "data.json").read_text())
    assert "toy_plugin" in json.dumps(data)
    track_pages = list((site / "tracks").glob("*.html"))
    assert any("toy_plugin" in p.read_text() for p in track_pages), "toy_plugin is on no track page"


BROKEN_ERROR = (
    # the distribution is named first (issue 44: a plugin that fails at import is named by where it came from)
    "plugin method 'broken_plugin' (fssl-broken-plugin 0.1.0 (fssl_broken_plugin.method:BrokenPlugin)) "
    "cannot be loaded: "
    "ImportError: fssl_broken_plugin needs the package 'no-such-dependency' (broken on purpose: a test "
    "fixture)"
)
BUILTIN_GRID = """
name: builtin_only
base: {dataset: {name: digits, size: 8}, backbone: {name: resnet_micro, width: 4}, partition: iid,
       fl: {num_clients: 2, rounds: 1}, tasks: [knn]}
method_common: {batch_size: 32}
axes: {method: [no_pretrain], seed: [0]}
"""


@pytest.mark.slow
def test_a_broken_plugin_is_one_warning_and_fails_only_the_grids_that_name_it(
    plugin_env: dict[str, str], listed: subprocess.CompletedProcess, tmp_path: Path
) -> None:
    """A real installed package whose module raises ImportError, next to the working toy plugin."""
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
    assert "toy_plugin" in names and "fedavg_simclr" in names and "broken_plugin" not in names
    warnings = [line for line in listed.stderr.splitlines() if "broken_plugin" in line]
    # one line naming the plugin and its error
    assert warnings == [f"warning: {BROKEN_ERROR}"], listed.stderr

    grid = tmp_path / "builtin.yaml"
    grid.write_text(BUILTIN_GRID, encoding="utf-8")
    root = tmp_path / "runs"
    ran = _run(
        [
            "-m",
            "benchmark",
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
        ],
        plugin_env,
        tmp_path,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr  # a grid of built-in methods runs, for real
    assert len(list(root.glob("no_pretrain/*/record.json"))) == 1, ran.stdout + ran.stderr

    broken = tmp_path / "broken.yaml"
    broken.write_text(
        BUILTIN_GRID.replace("[no_pretrain]", "[no_pretrain, broken_plugin]"), encoding="utf-8"
    )
    stopped = _run(
        [
            "-m",
            "benchmark",
            "run",
            "--grid",
            str(broken),
            "--root",
            str(tmp_path / "runs2"),
            "--no-wandb",
            "--device",
            "cpu",
            "--workers",
            "1",
        ],
        plugin_env,
        tmp_path,
    )
    assert stopped.returncode == 2, stopped.stdout + stopped.stderr
    assert stopped.stderr.strip().splitlines() == [f"error: {BROKEN_ERROR}"]
    assert not (tmp_path / "runs2").exists()  # stopped at the door: nothing written
