"""No stale record through shared code: methods/versions.lock.json pins each method's version to a
digest of its code (its module and every methods.* module it imports, transitively), and methods
compose shared pieces instead of inheriting from, or importing, one another (issue 17)."""

from __future__ import annotations

import ast

from benchmark.commands.method_table import in_tree_methods, lock_problems, module_source
from benchmark.contracts.registries import METHODS, load_builtins

load_builtins()


def test_every_method_code_change_comes_with_a_version_bump_or_a_refreshed_lock() -> None:
    problems = lock_problems()
    assert not problems, "\n".join(problems)


def test_no_method_subclasses_another_method() -> None:
    classes = {METHODS.get(n) for n in METHODS.names()}
    for cls in classes:
        parents = [p.__name__ for p in cls.__mro__[1:] if p in classes]
        assert not parents, (
            f"{cls.__name__} subclasses {parents}: compose methods/_shared pieces instead"
        )


def test_no_method_module_imports_another_method_module() -> None:
    """Shared code lives in methods/_shared; a method file importing another would run code that
    neither its version nor ``reuses`` accounts for."""
    own = {cls.__module__ for _, cls, _ in in_tree_methods()}
    for module in sorted(own):
        tree = ast.parse(module_source(module).read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not (imported & own) - {module}, (
            f"{module} imports {sorted((imported & own) - {module})}"
        )


def test_every_shared_module_has_at_least_two_method_files_using_it() -> None:
    """README: each method is in one file of methods/; methods/_shared holds only what two or more
    method files use (directly or through another shared module). Maths one method alone uses
    lives in its file (issue 40 folded five such modules back)."""
    from pathlib import Path

    from benchmark.commands.method_table import module_digests

    shared_dir = Path(__file__).resolve().parents[2] / "methods" / "_shared"
    shared = {f"methods._shared.{p.stem}" for p in shared_dir.glob("*.py") if p.stem != "__init__"}
    users: dict[str, set[str]] = {m: set() for m in shared}
    for module in {cls.__module__ for _, cls, _ in in_tree_methods()}:
        for used in set(module_digests(module)) & shared:
            users[used].add(module)
    lonely = {m: sorted(u) for m, u in users.items() if len(u) < 2}
    assert not lonely, f"shared modules with fewer than two method files using them: {lonely}"
