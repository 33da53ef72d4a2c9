"""The plugin API is versioned: ``benchmark.api.API_VERSION``, the package version, ``--version``,
and a plugin written for plugin API 1 (a plain class with the method hooks) refused in one line
naming the change and the migration (docs/adding-a-method.md §10)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import benchmark
from benchmark.api import API_VERSION, MethodBase
from benchmark.core.registry import Registry, RegistryError

REPO = Path(__file__).resolve().parents[2]


class FedSimSiam:
    """A plugin as plugin API 1 documented it: a plain class with the four hooks, no base class, the
    encoder built from the server state alone and completed by the runner."""

    name = "fedsimsiam"
    version = "1"

    def __init__(self, cfg: Any, backbone: Any) -> None:
        self.cfg, self.backbone = cfg, backbone

    def broadcast(self, server: Any, ctx: Any) -> Any: ...

    def client_update(self, down: Any, state: Any, data: Any, ctx: Any) -> Any: ...

    def server_aggregate(self, server: Any, uploads: Any, ctx: Any, public: Any = None) -> Any: ...

    def encoder(self, server: Any) -> Any: ...


def _methods_registry() -> Registry:
    from benchmark.contracts.method import explain_refusal

    return Registry("method", base=MethodBase, explain=explain_refusal)


def test_an_api1_plugin_is_refused_in_one_line_naming_the_migration() -> None:
    reg = _methods_registry()
    with pytest.raises(RegistryError) as err:
        reg.register("fedsimsiam")(FedSimSiam)
    msg = str(err.value)
    assert "\n" not in msg and "plugin API 1" in msg and f"plugin API {API_VERSION}" in msg
    assert "class FedSimSiam(benchmark.api.MethodBase)" in msg and "(cfg, backbone, inputs)" in msg
    assert "docs/adding-a-method.md §10" in msg


def test_an_api1_plugin_from_an_entry_point_is_refused_alike() -> None:
    reg = _methods_registry()
    reg.register("fedsimsiam", target=f"{__name__}:FedSimSiam")  # what an entry point becomes
    with pytest.raises(RegistryError, match="plain class written for plugin API 1"):
        reg.get("fedsimsiam")


def test_the_shipped_methods_registry_gives_the_api1_refusal() -> None:
    from benchmark.contracts.registries import METHODS

    assert METHODS.explain is not None and METHODS.explain("x", FedSimSiam)
    assert (
        METHODS.explain("x", type("NoHooks", (), {})) is None
    )  # anything else: the generic message


def test_versions_agree_and_the_cli_prints_them() -> None:
    assert re.fullmatch(r"\d+\.\d+", API_VERSION)
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert f'version = "{benchmark.__version__}"' in pyproject
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{benchmark.__version__}]" in changelog
    out = subprocess.run(
        [sys.executable, "-m", "benchmark", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"fssl-bench {benchmark.__version__} (plugin API {API_VERSION})"


API1_PLUGIN = '''
class FedSimSiam:
    """Written for plugin API 1: a plain class with the four hooks."""

    name = "fedsimsiam"
    version = "1"

    def __init__(self, cfg, backbone): ...
    def broadcast(self, server, ctx): ...
    def client_update(self, down, state, data, ctx): ...
    def server_aggregate(self, server, uploads, ctx, public=None): ...
    def encoder(self, server): ...
'''

# one interpreter, three commands: what a user with the old plugin installed runs
API1_COMMANDS = """
import sys
from benchmark.cli import main
for argv in sys.argv[1:]:
    print(f"== {argv} -> {main(argv.split())}", flush=True)
"""


def fake_distribution(site: Path, dist: str, module: str, source: str, entry: str) -> None:
    """What ``pip install --target site`` leaves: the package and its ``.dist-info`` with the
    entry point (importlib.metadata finds it on sys.path), without pip."""
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(source, encoding="utf-8")
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(f"[fssl_bench.methods]\n{entry}\n", encoding="utf-8")
    (info / "top_level.txt").write_text(f"{module}\n", encoding="utf-8")


def test_an_installed_api1_plugin_fails_only_where_it_is_used(tmp_path: Path) -> None:
    """Issue 40: one installed plugin-API-1 plugin made ``list methods`` and a dry run of a grid
    that never names it exit 2; it is one warning in ``list`` and fails only the grid naming it."""
    import os

    site = tmp_path / "site"
    fake_distribution(
        site,
        "fssl-fedsimsiam",
        "fssl_fedsimsiam",
        API1_PLUGIN,
        "fedsimsiam = fssl_fedsimsiam:FedSimSiam",
    )
    grid = tmp_path / "old.yaml"
    grid.write_text(
        (REPO / "benchmark" / "grids" / "smoke.yaml")
        .read_text(encoding="utf-8")
        .split("axes:")[0]
        .replace("name: smoke", "name: old")
        + "axes:\n  method: [fedsimsiam]\n",
        encoding="utf-8",
    )
    root = tmp_path / "runs"
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            API1_COMMANDS,
            "list methods",
            f"run --grid smoke --dry-run --no-wandb --root {root}",
            f"run --grid {grid} --dry-run --no-wandb --root {root}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])},
    )
    assert out.returncode == 0, out.stderr
    codes = re.findall(r"^== (.*) -> (\d+)$", out.stdout, re.MULTILINE)
    assert [int(c) for _, c in codes] == [0, 0, 2], out.stdout + out.stderr
    listing = out.stdout.split("== list methods")[0]
    assert "fedavg_simclr" in listing and "fedsimsiam" not in listing
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    api1 = [line for line in warnings if "plugin API 1" in line]
    assert len(api1) == 1 and "fedsimsiam" in api1[0], out.stderr
    assert re.search(r"^error: .*'fedsimsiam'.*plugin API 1", out.stderr, re.MULTILINE), out.stderr
