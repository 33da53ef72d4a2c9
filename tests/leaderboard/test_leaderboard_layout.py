"""The leaderboard's layout (docs/architecture.md, "The leaderboard"): no function over 80 lines, no
private name imported across its files, and each shared concept with one home."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.benchmark.test_function_size import LIMIT, long_functions

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "leaderboard"


def private_imports(path: Path) -> list[str]:
    """``from leaderboard.x import _y`` (or ``leaderboard.x._y``) anywhere in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("leaderboard"):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            base = node.value
            if isinstance(base, ast.Name) and base.id in {"build", "render", "pages", "views"}:
                found.append(f"{base.id}.{node.attr}")
    return found


def test_no_leaderboard_function_is_longer_than_80_lines() -> None:
    found = {
        str(p.relative_to(ROOT)): hits
        for p in sorted(PACKAGE.rglob("*.py"))
        for hits in [long_functions(p)]
        if hits
    }
    assert not found, f"functions over {LIMIT} lines: {found}"


def test_no_private_name_is_imported_across_leaderboard_files() -> None:
    found = {
        str(p.relative_to(ROOT)): hits
        for p in sorted(PACKAGE.rglob("*.py"))
        for hits in [private_imports(p)]
        if hits
    }
    assert not found, f"private names imported from another module: {found}"


def test_the_private_import_check_sees_one(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from leaderboard.build import _per_client\n")
    assert private_imports(src) == ["leaderboard.build._per_client"]


def test_one_home_for_shared_helpers() -> None:
    """``finite``, the α formats, ``eval_split_of`` and the tracks file are defined once."""
    homes: dict[str, list[str]] = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                homes.setdefault(node.name, []).append(p.name)
    for name in (
        "finite",
        "_finite",
        "_finite_number",
        "fmt_alpha",
        "eval_split_of",
        "alpha_number",
    ):
        assert len(homes.get(name, [])) <= 1, (name, homes.get(name))
    assert "eval_split_of" not in homes  # benchmark.records.tracks is its home
    assert homes["finite"] == ["formatting.py"] and homes["fmt_alpha"] == ["formatting.py"]
    from benchmark.core.paths import TRACKS_FILE
    from leaderboard.site_config import DEFAULT_TRACKS

    assert DEFAULT_TRACKS is TRACKS_FILE
