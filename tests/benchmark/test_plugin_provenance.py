"""A plugin's provenance is real however it is installed (issue 33, item 8).

The scaffolded plugin is pip-installed into a throwaway virtual environment layered on the running
one (it sees the packages the tests run with, never the base interpreter's; offline, no build
isolation), once editable and once as a regular install, and a fresh process of that environment computes the provenance a record would carry: the
same non-empty source digest both ways, no ``file://`` URL of the author's disk, and another digest
once a source line changes.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from benchmark.commands.new_method import write_scaffold

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import json
from benchmark.core.provenance import component_provenance
from benchmark.contracts.registries import METHODS, load_builtins
load_builtins()
print(json.dumps(component_provenance(METHODS.get("fedprov"))))
"""


def _run(cmd: list[str], **kw: object) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env=env, check=False, **kw
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def running_site_dirs() -> list[str]:
    """The running environment's site-packages folders, in sys.path order: a venv's own (where
    the README's install put setuptools, pip and the project's dependencies), never the base
    interpreter's that ``python -m venv --system-site-packages`` would show instead (issue 59)."""
    found = [
        *site.getsitepackages(),
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    ]
    return [d for i, d in enumerate(found) if d not in found[:i] and Path(d).is_dir()]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv (no pip of its own) whose site-packages adds the running environment's with
    ``site.addsitedir``, so its python imports the very pip, setuptools and torch the tests run
    with (and their ``.pth`` files, editable installs included); what pip installs there lands in
    the venv's own site-packages and is gone with it."""
    where = tmp_path_factory.mktemp("venv") / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", str(where)])
    python = where / "bin" / "python"
    own = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    layer = "".join(f"import site; site.addsitedir({d!r})\n" for d in running_site_dirs())
    (Path(own.strip()) / "_fssl_running_env.pth").write_text(layer)
    return python


def _install(python: Path, package: Path, *, editable: bool) -> dict:
    pip = [
        str(python),
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-q",
    ]
    _run([*pip, *(["-e"] if editable else []), str(package)])
    try:
        return json.loads(_run([str(python), "-c", PROBE]))
    finally:
        _run([str(python), "-m", "pip", "uninstall", "-y", "-q", "fssl-fedprov"])


@pytest.mark.slow
def test_editable_and_regular_installs_give_the_same_real_digest(
    venv: Path, tmp_path: Path
) -> None:
    write_scaffold("fedprov", tmp_path / "fssl-fedprov", plugin=True)
    package = tmp_path / "fssl-fedprov"
    editable = _install(venv, package, editable=True)
    regular = _install(venv, package, editable=False)
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of nothing
    assert editable["source_digest"] == regular["source_digest"] != empty
    assert editable["files"] == regular["files"] == 2  # __init__.py and method.py
    assert (editable["distribution"], editable["version"]) == ("fssl-fedprov", "0.1.0")
    assert "url" not in editable and "file://" not in json.dumps(editable)
    method = package / "src" / "fssl_fedprov" / "method.py"
    method.write_text(method.read_text().replace("tau: float = 0.5", "tau: float = 0.2"))
    changed = _install(venv, package, editable=True)
    assert changed["source_digest"] not in (editable["source_digest"], empty)
