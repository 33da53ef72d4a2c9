"""Import rules of docs/design.md §4.2 and docs/architecture.md, checked on the source (AST),
imports inside functions included:

- the packages of benchmark/ form an order of layers (LAYERS): no import runs back up to a later
  layer, and no import circle exists, counting ``if TYPE_CHECKING:`` imports too (a type named back
  up is a dependency of meaning a reader has to follow, even if it never runs);
- an import by name (``importlib.import_module("pkg.mod")``, ``__import__``, a registry's lazy
  ``target="pkg.mod:Attr"``) is an import like any other;
- methods/ and tasks/ reach the harness only through ``benchmark.api``;
- benchmark/ never imports the plugin packages (tasks/, methods/) or the site (leaderboard/), but for
  its top layer, the command line: the built-in components are declared in pyproject.toml like a
  plugin's (entry-point group ``fssl_bench.builtins``) and found through that declaration;
- benchmark/records/ and leaderboard/ never import torch or wandb; only tracking and collect import
  wandb;
- no import cycle exists among the project's modules (run-time imports; across methods/, tasks/,
  leaderboard/).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("benchmark", "methods", "tasks", "leaderboard")


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    return skip


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, *, typing: bool = False) -> list[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved), wherever the
    statement is; ``typing``: ``if TYPE_CHECKING:`` imports included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if typing else _type_checking_nodes(tree)
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out += [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call):
            out += by_name(node)
    return out


BY_NAME = {"import_module", "__import__"}


def by_name(call: ast.Call) -> list[str]:
    """The module a call imports by name: ``importlib.import_module("a.b")``, ``__import__("a.b")``,
    or a lazy registration's ``target="a.b:Attr"``; [] for any other call (or a name computed at run
    time)."""
    func = call.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = call.args[0] if call.args else None
    if called in BY_NAME and isinstance(first, ast.Constant) and isinstance(first.value, str):
        return [first.value]
    return [
        kw.value.value.partition(":")[0]
        for kw in call.keywords
        if kw.arg == "target"
        and isinstance(kw.value, ast.Constant)
        and isinstance(kw.value.value, str)
    ]


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def project_graph(*, typing: bool = False) -> dict[str, set[str]]:
    """module → the project modules it imports (a ``from pkg import name`` of a submodule counts as
    that module); ``typing``: ``if TYPE_CHECKING:`` imports included."""
    paths = {module_name(p): p for pkg in PACKAGES for p in files(pkg)}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in paths.items():
        for target in imports(path, typing=typing):
            hit = resolve(target)
            if (
                hit is not None and hit != mod and not mod.startswith(f"{hit}.")
            ):  # a package's own __init__
                graph[mod].add(hit)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    found = cycles(project_graph())
    assert not found, "import cycles (module-level or inside functions): " + "; ".join(
        " <-> ".join(c) for c in found
    )


def test_cycle_finder_finds_a_cycle_through_a_function_level_import() -> None:
    """The checker itself: a function-level import closing a loop is a cycle; a TYPE_CHECKING import
    is not."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    import y\n"
    )
    skip = _type_checking_nodes(tree)
    names = [
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import) and id(n) not in skip
        for a in n.names
    ]
    assert names == ["y"]


# The layers of benchmark/, in the order a cell lives (docs/architecture.md §6): a module may import
# its own layer and the layers before it, never a later one. The foundation comes first (canonical
# JSON, digests and the repository's paths, which the torch-free records use too).
LAYERS = (
    "benchmark.core",  # canonical JSON, registry, strict configs, errors, precision, seeding, paths
    "benchmark.records",  # the record schema, record files, tracks, the results store (torch-free)
    # optional: the portable CPU kernel mode's switch and its vendor-free maths (a record's kernel
    # state is handed to records/ by the runner, never read from here)
    "benchmark.portable",
    "benchmark.contracts",  # value types, the Method contract, specs and the cell, registries
    "benchmark.data",  # datasets, partitioners, augmentation, client views
    # building blocks methods use: backbones, heads, tensors, aggregation, local loop
    "benchmark.building_blocks",
    "benchmark.grids",  # grid YAML files, their expansion into cells, the run plan
    "benchmark.runroot",  # run directory, locks, status (torch-free)
    # stages, runner, round loop, client store, checkpoints, pre-training, tracking
    "benchmark.engine",
    # optional: GPU calibration, a device's checks and what a grid costs on it (its driver later)
    "benchmark.calibration",
    # execute_cell and the settle loop: local, Ray, SLURM, options, preflight
    "benchmark.launchers",
    "benchmark.submission",  # submit, checks, oracle, bundle, accept, re-evaluation, W&B collect
    # one module per subcommand (run, doctor and its calibration, verify and the kernel
    # fingerprint, check-method, ...) and the tools beside them (method table, tuning)
    "benchmark.commands",
    "benchmark.api",  # the one door for methods, tasks and plugins
    "benchmark.tools",  # deprecated aliases of three benchmark.commands modules (until 0.3)
    "benchmark.cli",  # the command line: the parser and the table of subcommands
)
# the package's empty __init__ (first) and `python -m benchmark` (last)
ENTRY = ("benchmark", "benchmark.__main__")


def layer_of(module: str) -> int | None:
    if module == ENTRY[0]:
        return -1
    if module == ENTRY[1]:
        return len(LAYERS)
    # the most specific entry that holds the module (benchmark.commands.kernel_census, not benchmark.portable)
    held = [
        (len(prefix), i)
        for i, prefix in enumerate(LAYERS)
        if module == prefix or module.startswith(f"{prefix}.")
    ]
    return max(held)[1] if held else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of a later layer (or of a module no layer holds)."""
    bad = []
    for mod, targets in sorted(graph.items()):
        for target in sorted(t for t in targets if t.startswith("benchmark")):
            here, there = layer_of(mod), layer_of(target)
            if here is None or there is None or there > here:
                bad.append(f"{mod} -> {target}")
    return bad


def harness_graph() -> dict[str, set[str]]:
    """The import graph of benchmark/, ``if TYPE_CHECKING:`` imports included."""
    graph = project_graph(typing=True)
    return {
        m: {t for t in ts if t.startswith("benchmark")}
        for m, ts in graph.items()
        if m.startswith("benchmark")
    }


def test_every_harness_module_sits_in_a_layer() -> None:
    loose = [m for m in map(module_name, files("benchmark")) if layer_of(m) is None]
    assert not loose, f"modules outside every layer of LAYERS: {loose}"


def test_no_import_runs_back_up_a_layer() -> None:
    bad = upward_imports(harness_graph())
    assert not bad, "imports of a later layer (TYPE_CHECKING included): " + "; ".join(bad)


def test_no_import_circle_in_the_harness_counting_type_only_imports() -> None:
    found = cycles(harness_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_layer_checker_flags_an_import_back_up() -> None:
    graph = {
        "benchmark.core.config": {"benchmark.core.canonical"},  # down: fine
        "benchmark.contracts.types": {
            "benchmark.data.client_views"
        },  # up: contracts come before data
        "benchmark.engine.rounds": {"benchmark.nowhere"},  # a module no layer holds
    }
    assert upward_imports(graph) == [
        "benchmark.contracts.types -> benchmark.data.client_views",
        "benchmark.engine.rounds -> benchmark.nowhere",
    ]


# the command line (the subcommands and their table) may import the built-in components and the
# site (`run --site`); no other layer
TOP = ("benchmark.commands", "benchmark.cli")


def plugin_imports(path: Path) -> list[str]:
    """The modules of methods/, tasks/ or leaderboard/ that ``path`` imports (by name included)."""
    return sorted(
        {m for m in imports(path) if m.split(".")[0] in {"tasks", "methods", "leaderboard"}}
    )


@pytest.mark.parametrize("path", files("benchmark"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_harness_never_imports_plugins_or_the_site(path: Path) -> None:
    if layer_of(module_name(path)) in {LAYERS.index(t) for t in TOP}:
        return
    bad = plugin_imports(path)
    assert not bad, (
        f"{path.relative_to(ROOT)} imports {bad}: declare the module that registers a built-in "
        "component in pyproject.toml (entry-point group fssl_bench.builtins), register a hook in "
        "benchmark/contracts/registries.py, or move the shared type into benchmark/"
    )


def test_an_import_by_name_is_an_import(tmp_path: Path) -> None:
    """The checker itself: loading a module by name is seen (the arrows registries.py once hid)."""
    src = tmp_path / "m.py"
    src.write_text(
        "import importlib\nfrom importlib import import_module\n"
        "def load():\n    importlib.import_module('methods')\n    import_module('tasks.registration')\n"
        "    __import__('leaderboard.site')\n    REG.register('x', target='tasks.probes.knn:KNN')\n"
        "    importlib.import_module(computed)\n"
    )
    tree = ast.parse(src.read_text())
    found = [m for n in ast.walk(tree) if isinstance(n, ast.Call) for m in by_name(n)]
    assert found == ["methods", "tasks.registration", "leaderboard.site", "tasks.probes.knn"]


DOTTED_PLUGIN = re.compile(r"^(tasks|methods|leaderboard)(\.[A-Za-z_]\w*)+(:[A-Za-z_][\w.]*)?$")


def _strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_no_harness_module_names_a_plugin_module() -> None:
    """A dotted module name of methods/, tasks/ or leaderboard/ in a string is an import waiting to
    happen (a table of names handed to importlib later): none in benchmark/, the command line
    included (it imports what it needs with import statements)."""
    bad = {
        str(p.relative_to(ROOT)): hits
        for p in files("benchmark")
        for hits in [[s for s in _strings(p) if DOTTED_PLUGIN.match(s)]]
        if hits
    }
    assert not bad, f"plugin modules named in strings: {bad}"


def test_the_built_in_components_are_declared_in_pyproject() -> None:
    """Every module of the entry-point group fssl_bench.builtins exists, and the group names the
    modules that register every built-in task and method (what load_builtins imports)."""
    from benchmark.contracts.registries import TASKS_ENTRY, builtin_modules

    declared = builtin_modules()
    assert TASKS_ENTRY in declared and "methods" in declared.values()
    for module in declared.values():
        path = ROOT / module.replace(".", "/")
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), module


@pytest.mark.parametrize(
    "path", files("methods") + files("tasks"), ids=lambda p: str(p.relative_to(ROOT))
)
def test_methods_and_tasks_import_only_the_api(path: Path) -> None:
    allowed = {"benchmark.api", "benchmark.api.*"}
    bad = sorted(
        {
            m
            for m in imports(path)
            if m.startswith("benchmark")
            and m not in allowed
            and m.rpartition(".")[0] not in allowed
        }
    )
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}; use benchmark.api"


def test_cards_and_registrations_import_no_torch_directly() -> None:
    """``run`` reads the registrations before torch, and a card is data: they import only the
    torch-free part of ``benchmark.api`` (tests/tasks/test_registration.py imports them and checks
    that torch stays out)."""
    for path in [*files("tasks/cards"), ROOT / "tasks" / "registration.py"]:
        bad = [m for m in imports(path) if m.split(".")[0] in {"torch", "torchvision", "timm"}]
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize(
    "path",
    files("benchmark/records") + files("leaderboard"),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_records_and_leaderboard_are_torch_free(path: Path) -> None:
    bad = [m for m in imports(path) if m.split(".")[0] in {"torch", "wandb", "torchvision", "timm"}]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_status_collect_and_the_run_plan_import_without_torch() -> None:
    """What ``status``, ``collect``, the leaderboard and the fast missing-data check load stays
    torch-free at import (torch costs seconds; a machine without the data must hear so at once)."""
    import subprocess
    import sys

    mods = (
        "benchmark.runroot.rundir",
        "benchmark.launchers.options",
        "benchmark.core.errors",
        "benchmark.contracts.method",
        "benchmark.core.deviations",
        "benchmark.commands.run",
        "benchmark.launchers.preflight",
        "benchmark.records.store",
        "benchmark.records.tracks",
        "benchmark.cli",
    )
    code = f"import sys\nfor m in {mods!r}: __import__(m)\nassert 'torch' not in sys.modules, 'torch imported'"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_loading_the_registry_imports_neither_torchvision_nor_timm() -> None:
    """Every process that loads the registry (a run worker, a boxed ``declare`` child, ``list``,
    ``accept``) pays for each module it imports; torchvision's ``ops`` import ``torch._dynamo``
    (about 1.6 s of CPU) and timm's model zoo 0.85 s. The modules that need them (a ResNet or a
    ViT being built, the fine-tuning transforms) import them where they do; building a ResNet
    still gives torchvision's blocks."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from benchmark.contracts.registries import load_builtins\n"
        "load_builtins()\n"
        "heavy = sorted({'torchvision', 'timm', 'torch._dynamo'} & set(sys.modules))\n"
        "assert not heavy, heavy\n"
        "from benchmark.building_blocks.backbones import build_backbone\n"
        "net, _ = build_backbone('resnet_micro', {'width': 2})\n"
        "assert type(net.layer1[0]).__module__ == 'torchvision.models.resnet', type(net.layer1[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_only_tracking_and_collect_import_wandb() -> None:
    allowed = {"tracking.py", "wandb_collect.py"}
    for path in files("benchmark"):
        if path.name not in allowed:
            assert "wandb" not in [m.split(".")[0] for m in imports(path)], path


def repeated_names(paths: list[Path]) -> dict[str, list[str]]:
    """File names (``__init__.py`` aside) that more than one folder holds, with their folders."""
    where: dict[str, list[str]] = defaultdict(list)
    for p in paths:
        if p.name != "__init__.py":
            where[p.name].append(str(p.parent.relative_to(ROOT)))
    return {name: sorted(dirs) for name, dirs in sorted(where.items()) if len(dirs) > 1}


def test_no_file_name_repeats_across_the_harness_packages() -> None:
    """One name, one file (issue 58): `check_method.py` in three folders sent a reader to the wrong
    one; a name says what its file holds, once."""
    found = repeated_names(files("benchmark"))
    assert not found, f"file names held by more than one benchmark/ folder: {found}"


def test_the_repeat_finder_finds_a_repeat() -> None:
    paths = [
        ROOT / "benchmark" / d / n for d, n in (("a", "env.py"), ("b", "env.py"), ("a", "x.py"))
    ]
    paths += [ROOT / "benchmark" / d / "__init__.py" for d in ("a", "b")]
    assert repeated_names(paths) == {"env.py": ["benchmark/a", "benchmark/b"]}
