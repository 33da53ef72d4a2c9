"""The documented paths that moved in issue 49 still work for one release: importing
``benchmark.tools.<name>`` gives ``benchmark.commands.<name>`` with a DeprecationWarning, and
``python -m benchmark.tools.method_table`` runs the table."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["check_method", "method_table", "tuning"])
def test_an_old_tools_path_imports_the_moved_module(name: str) -> None:
    sys.modules.pop(f"benchmark.tools.{name}", None)
    with pytest.warns(DeprecationWarning, match=f"benchmark.commands.{name}"):
        old = importlib.import_module(f"benchmark.tools.{name}")
    assert old is importlib.import_module(f"benchmark.commands.{name}")


def test_python_m_the_old_method_table_path_runs_it() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmark.tools.method_table", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--lock" in proc.stdout
