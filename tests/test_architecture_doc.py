"""docs/architecture.md names real code: every backticked file exists, every ``file.py: Name`` is an
attribute of that module, and every backticked code name (``RunDir.done``, ``export_encoder(...)``,
``preflight.preflight``) is defined somewhere in the packages. A renamed function fails here until
the page follows."""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
PACKAGES = ("benchmark", "methods", "tasks", "leaderboard", "perf")
FILE = re.compile(r"^([\w/.]+\.py|[\w/]+/)(?::\s*(\w+))?")
RUN_DIRS = {
    "scores",
    "ckpt",
    "states",
    "tasks",
}  # folders of a run directory (benchmark.runroot.rundir.DIR_NAMES)
CODE_NAME = re.compile(r"^(\w+(?:\.\w+)*)(\(.*\))?$")


def spans() -> list[str]:
    return re.findall(r"`([^`\n]+)`", DOC.read_text(encoding="utf-8"))


@cache
def defined() -> frozenset[str]:
    """Every name the packages define: modules, classes, functions and methods, their arguments,
    assigned names, dataclass fields and ``self.x`` attributes; plus the builtins."""
    names = set(dir(builtins))
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            names.update(path.relative_to(REPO).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, ast.arg):
                    names.add(node.arg)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.add(node.id)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
    return frozenset(names)


@cache
def signatures() -> dict[str, list[list[str]]]:
    """Each function name -> the positional parameter names of every definition of it (self/cls
    dropped)."""
    out: dict[str, list[list[str]]] = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    params = [
                        a.arg
                        for a in node.args.posonlyargs + node.args.args
                        if a.arg not in ("self", "cls")
                    ]
                    out.setdefault(node.name, []).append(params)
    return out


def signature_problem(name: str, call: str) -> str | None:
    """``f(a, b)`` as the page writes it: the leading plain identifiers must be f's first parameters
    in some definition of f (``...`` ends the comparison; a method defined nowhere as a function is
    not compared)."""
    args = []
    for arg in (a.strip() for a in call[1:-1].split(",")):
        if not arg.isidentifier():
            break
        args.append(arg)
    defs = signatures().get(name.split(".")[-1])
    if not args or not defs or any(d[: len(args)] == args for d in defs):
        return None
    return f"{name}{call}: its parameters are {' / '.join('(' + ', '.join(d) + ')' for d in defs)}"


def resolve_file(path: str) -> Path | None:
    for base in (
        REPO,
        REPO / "benchmark",
    ):  # "records/env.py" and "locks.py" are read inside benchmark/
        if (base / path).exists():
            return base / path
    return None


def problems(texts: list[str]) -> list[str]:
    out = []
    for text in texts:
        if (
            "<" in text
            or re.fullmatch(r"[\w.-]+\.(json|jsonl|pt|yaml)", text)
            or text.rstrip("/") in RUN_DIRS
        ):
            continue  # a path template, or a file or folder of a run directory
        m = FILE.match(text)
        if m and (m.group(2) or m.end() == len(text)):
            path = resolve_file(m.group(1))
            if path is None:
                out.append(f"{text}: no such file")
            elif m.group(2):
                module = ".".join(path.relative_to(REPO).with_suffix("").parts)
                if not hasattr(importlib.import_module(module), m.group(2)):
                    out.append(f"{text}: {module} has no {m.group(2)}")
            continue
        m = CODE_NAME.match(text)
        if " " in text.split("(")[0]:
            continue  # a command line or prose in code font
        if m and ("." in m.group(1) or m.group(2) or "_" in m.group(1) or m.group(1)[:1].isupper()):
            missing = [part for part in m.group(1).split(".") if part not in defined()]
            if missing:
                out.append(f"{text}: {', '.join(missing)} defined nowhere in {', '.join(PACKAGES)}")
            elif m.group(2) and (wrong := signature_problem(m.group(1), m.group(2))):
                out.append(wrong)
    return out


def test_every_code_name_in_the_architecture_page_exists() -> None:
    assert problems(spans()) == []


def test_the_check_sees_a_renamed_function_and_a_missing_file() -> None:
    assert (
        problems(
            [
                "benchmark/engine/stages.py: export_encoder",
                "RunDir.done",
                "export_encoder(method, server)",
            ]
        )
        == []
    )
    assert problems(["benchmark/engine/stages.py: export_the_encoder"]) and problems(
        ["RunDir.is_done"]
    )
    assert problems(["benchmark/no_such_module.py"]) and problems(["export_the_encoder(method)"])
    assert problems(["export_encoder(method, pretrained)"])  # the signature the page once gave


# ---- the citations of the layered layout: ``file.py: Class.attr`` (an attribute of that class) and
# dotted ``benchmark.x`` module paths (a module, or a name defined in one)
ROOTS = ("benchmark", "methods", "tasks", "leaderboard", "tests", "perf", "docs", "results")
CITE_NAME = re.compile(r"`([\w./-]+\.py|[\w./-]+/)(?::\s*([A-Za-z_][\w.]*))?`")
DOTTED = re.compile(r"`(benchmark(?:\.[A-Za-z_]\w*)+)`")


def module_names(path: Path) -> dict[str, set[str]]:
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


def citation_problems(text: str) -> list[str]:
    bad = []
    for path, name in CITE_NAME.findall(text):
        if path.split("/")[0] not in ROOTS:
            continue
        file = REPO / path
        if not file.exists():
            bad.append(f"{path} does not exist")
            continue
        if name:
            head, _, attr = name.partition(".")
            names = module_names(file)
            if head not in names or (attr and attr not in names[head]):
                bad.append(f"{path}: {name} is not defined there")
    for dotted in DOTTED.findall(text):
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            base = REPO.joinpath(*parts[:i])
            module = (
                base.with_suffix(".py")
                if base.with_suffix(".py").exists()
                else base / "__init__.py"
            )
            if module.exists():
                rest = parts[i:]
                if rest and rest[0] not in module_names(module):
                    bad.append(f"{dotted}: {rest[0]} is not defined in {module.relative_to(REPO)}")
                break
        else:
            bad.append(f"{dotted} is no module")
    return bad


def test_the_architecture_page_names_only_what_exists() -> None:
    bad = citation_problems(DOC.read_text(encoding="utf-8"))
    assert not bad, "docs/architecture.md: " + "; ".join(bad)


def test_the_checker_catches_a_renamed_function_a_moved_file_and_a_missing_module() -> None:
    text = (
        "`benchmark/engine/runner.py: run_cell` `benchmark/engine/runner.py: run_cells` "
        "`benchmark/simulate.py` `benchmark/runroot/rundir.py: RunDir.write_record` "
        "`benchmark/runroot/rundir.py: RunDir.write_recrd` `benchmark.grid` `benchmark.api`"
    )
    assert citation_problems(text) == [
        "benchmark/engine/runner.py: run_cells is not defined there",
        "benchmark/simulate.py does not exist",
        "benchmark/runroot/rundir.py: RunDir.write_recrd is not defined there",
        "benchmark.grid: grid is not defined in benchmark/__init__.py",
    ]


# ---- the newcomer's path (issue 58): one cell from the command line to the site, file by file
PATH_STEP = re.compile(r"^\d+\. (↩ )?`([\w./-]+\.py): ([\w.]+)`", re.MULTILINE)


def newcomer_path(text: str) -> list[tuple[bool, str, str]]:
    """(turn-back?, file, name) for each step between the page's newcomer-path markers."""
    block = text.split("<!-- newcomer-path -->")[1].split("<!-- /newcomer-path -->")[0]
    steps = [(bool(back), path, name) for back, path, name in PATH_STEP.findall(block)]
    assert len(steps) == len(re.findall(r"^\d+\. ", block, re.MULTILINE)), "a step without its file"
    return steps


def path_problems(steps: list[tuple[bool, str, str]]) -> list[str]:
    """A step that is not a turn-back opens a file not opened before; a turn-back reopens one; at
    most 20 files and 3 turn-backs."""
    bad, opened = [], []
    for back, path, name in steps:
        if back != (path in opened):
            bad.append(f"{path}: {'not opened before' if back else 'opened before, not marked ↩'}")
        if not back:
            opened.append(path)
    if len(opened) > 20:
        bad.append(f"{len(opened)} files (at most 20)")
    if (turns := sum(b for b, _, _ in steps)) > 3:
        bad.append(f"{turns} turn-backs (at most 3)")
    return bad


def test_the_newcomers_path_is_short_and_names_real_code() -> None:
    steps = newcomer_path(DOC.read_text(encoding="utf-8"))
    assert steps[0][1] == "benchmark/cli.py" and steps[-1][1].startswith("leaderboard/")
    assert path_problems(steps) == []
    assert problems([f"{path}: {name.split('.')[0]}" for _, path, name in steps]) == []


def test_the_path_check_counts_files_and_turn_backs() -> None:
    steps = [(False, f"f{i}.py", "x") for i in range(21)]
    assert path_problems(steps) == ["21 files (at most 20)"]
    back = [(False, "a.py", "x"), (False, "b.py", "y"), *[(True, "a.py", "z")] * 4]
    assert path_problems(back) == ["4 turn-backs (at most 3)"]
    assert path_problems([(False, "a.py", "x"), (False, "a.py", "y")])  # reopened, unmarked
