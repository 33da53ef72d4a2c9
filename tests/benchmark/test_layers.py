"""Import rules of DESIGN §4.2, checked on the source (AST): methods/ and tasks/ reach the harness only through
``benchmark.api``; benchmark/records/ and leaderboard/ never import torch or wandb; only tracking imports wandb."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", files("methods") + files("tasks"), ids=lambda p: str(p.relative_to(ROOT)))
def test_methods_and_tasks_import_only_the_api(path: Path) -> None:
    allowed = {"benchmark.api"}
    if path.parent.name == "cards":  # cards are read by the torch-free leaderboard: the torch-free records schema
        allowed.add("benchmark.records.schema")
    bad = [m for m in imports(path) if m.startswith("benchmark") and m not in allowed]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}; use benchmark.api"


def test_cards_are_torch_free() -> None:
    for path in files("tasks/cards"):
        bad = [m for m in imports(path) if m.split(".")[0] in {"torch", "torchvision", "timm"} or m == "benchmark.api"]
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", files("benchmark/records") + files("leaderboard"), ids=lambda p: str(p.relative_to(ROOT)))
def test_records_and_leaderboard_are_torch_free(path: Path) -> None:
    bad = [m for m in imports(path) if m.split(".")[0] in {"torch", "wandb", "torchvision", "timm"}]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_only_tracking_and_collect_import_wandb() -> None:
    allowed = {"tracking.py", "wandb_collect.py"}
    for path in files("benchmark"):
        if path.name not in allowed:
            assert "wandb" not in [m.split(".")[0] for m in imports(path)], path
