"""No stale record through shared code: methods/versions.lock.json pins each method's version to a
digest of its code (its module and every methods.* module it imports, transitively), and methods
compose shared pieces instead of inheriting from, or importing, one another (issue 17)."""

from __future__ import annotations

import ast

from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.tools.method_table import in_tree_methods, lock_problems, module_source

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
