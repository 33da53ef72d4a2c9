"""No function in the harness (benchmark/) or in the tasks (tasks/) is longer than 80 lines: a cell's
path from the CLI to its record, and a task's protocol, must be readable in one sitting
(docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 80


def long_functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (n.name, n.end_lineno - n.lineno + 1)
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.end_lineno - n.lineno + 1 > LIMIT
    ]


@pytest.mark.parametrize("package", ["benchmark", "tasks"])
def test_no_function_is_longer_than_80_lines(package: str) -> None:
    found = {
        str(p.relative_to(ROOT)): hits
        for p in sorted((ROOT / package).rglob("*.py"))
        for hits in [long_functions(p)]
        if hits
    }
    assert not found, f"functions over {LIMIT} lines: {found}"


def test_the_measure_counts_decorators_out_and_body_in(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("@d\ndef f():\n" + "    x = 1\n" * LIMIT + "\ndef g():\n    pass\n")
    assert long_functions(src) == [("f", LIMIT + 1)]


def test_no_method_function_is_longer_than_80_lines() -> None:
    """methods/ too: a method's algorithm is read against its paper, one function at a time."""
    found = {
        str(p.relative_to(ROOT)): hits
        for p in sorted((ROOT / "methods").rglob("*.py"))
        for hits in [long_functions(p)]
        if hits
    }
    assert not found, f"functions over {LIMIT} lines: {found}"
