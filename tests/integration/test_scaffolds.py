"""Scaffolds pass their own tests out of the box (issue 57): ``new-method NAME --plugin`` and
``new-task NAME --plugin`` are each written into a temporary folder, installed as their README says
(``pip install -e``: editable, offline, without build isolation, with the interpreter running this
test, into a ``--target`` folder so that nothing is installed into the environment itself) and their
own ``pytest`` run in a fresh process. Before, the task scaffold's test failed with ``UnknownName:
unknown method 'no_pretrain'``: nothing had registered the built-ins in that process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled")
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


@pytest.mark.parametrize(("command", "name"), [("new-method", "fedscaf"), ("new-task", "ncm_scaf")])
def test_a_scaffold_passes_its_own_tests(tmp_path: Path, command: str, name: str) -> None:
    from benchmark.cli import main

    env, pkg, site = _env(), tmp_path / f"fssl-{name}", tmp_path / "site"
    # the scaffold is written by this process's ``main`` (the command's own code; what is tested is
    # what it writes, installed and run in fresh processes below), not by a third Python importing
    # torch and the registry to write three files
    assert main([command, name, "--plugin", "--out", str(pkg)]) == 0
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    installed = subprocess.run(
        [*install, "--target", str(site), "-e", str(pkg)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert list(site.glob("*.dist-info/entry_points.txt")), "pip wrote no entry points"
    # the target as a site folder (its .pth puts the editable src/ on the path), then the
    # scaffold's own tests, as `pytest` in the package would run them
    run_tests = (
        "import site, sys; site.addsitedir(sys.argv[1]); import pytest; "
        "sys.exit(pytest.main([sys.argv[2], '-q', '-p', 'no:cacheprovider', '-x']))"
    )
    tests = subprocess.run(
        [sys.executable, "-c", run_tests, str(site), str(pkg / "tests")],
        cwd=pkg,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = tests.stdout + tests.stderr
    assert tests.returncode == 0, out[-4000:]
    assert " passed" in out and "failed" not in out
