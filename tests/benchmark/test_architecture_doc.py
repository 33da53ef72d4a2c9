"""docs/architecture.md names only files, modules and functions that exist: every ``path`` it cites
is a file or folder of the repository, every ``path.py: name`` is defined in that file
(``Class.attr``: an attribute of the class), every dotted ``benchmark.x`` is a module or a name
defined in one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
ROOTS = ("benchmark", "methods", "tasks", "leaderboard", "tests", "benchmarks", "docs", "results")
CITE = re.compile(r"`([\w./-]+\.py|[\w./-]+/)(?::\s*([A-Za-z_][\w.]*))?`")
DOTTED = re.compile(r"`(benchmark(?:\.[A-Za-z_]\w*)+)`")


def defined(path: Path) -> dict[str, set[str]]:
    """Top-level names of a module → the attributes each class defines (empty for the rest)."""
    out: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            attrs = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            attrs |= {
                t.id
                for n in node.body
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name)
            }
            attrs |= {
                n.target.id
                for n in node.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            }
            out[node.name] = attrs
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = set()
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.update({t.id: set() for t in targets if isinstance(t, ast.Name)})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update({(a.asname or a.name).split(".")[0]: set() for a in node.names})
    return out


def problems(text: str) -> list[str]:
    bad = []
    for path, name in CITE.findall(text):
        if path.split("/")[0] not in ROOTS:
            continue
        file = ROOT / path
        if not file.exists():
            bad.append(f"{path} does not exist")
            continue
        if name:
            head, _, attr = name.partition(".")
            names = defined(file)
            if head not in names or (attr and attr not in names[head]):
                bad.append(f"{path}: {name} is not defined there")
    for dotted in DOTTED.findall(text):
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            base = ROOT.joinpath(*parts[:i])
            module = (
                base.with_suffix(".py")
                if base.with_suffix(".py").exists()
                else base / "__init__.py"
            )
            if module.exists():
                rest = parts[i:]
                if rest and rest[0] not in defined(module):
                    bad.append(f"{dotted}: {rest[0]} is not defined in {module.relative_to(ROOT)}")
                break
        else:
            bad.append(f"{dotted} is no module")
    return bad


def test_the_architecture_page_names_only_what_exists() -> None:
    bad = problems(DOC.read_text(encoding="utf-8"))
    assert not bad, "docs/architecture.md: " + "; ".join(bad)


def test_the_checker_catches_a_renamed_function_a_moved_file_and_a_missing_module() -> None:
    text = (
        "`benchmark/engine/runner.py: run_cell` `benchmark/engine/runner.py: run_cells` "
        "`benchmark/simulate.py` `benchmark/runroot/rundir.py: RunDir.write_record` "
        "`benchmark/runroot/rundir.py: RunDir.write_recrd` `benchmark.grid` `benchmark.api`"
    )
    assert problems(text) == [
        "benchmark/engine/runner.py: run_cells is not defined there",
        "benchmark/simulate.py does not exist",
        "benchmark/runroot/rundir.py: RunDir.write_recrd is not defined there",
        "benchmark.grid: grid is not defined in benchmark/__init__.py",
    ]
