"""Layer rules (docs/design.md §4.2): the leaderboard and benchmark.records import neither torch nor
wandb."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = {"torch", "wandb", "torchvision", "timm"}


def _imports(path: Path, *, module_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    if module_level_only:  # imports at module level, including inside top-level if/try blocks
        nodes = [
            n
            for top in tree.body
            for n in ast.walk(top)
            if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_leaderboard_never_imports_torch_or_wandb() -> None:
    files = sorted((REPO / "leaderboard").rglob("*.py"))
    assert files
    for path in files:
        bad = _imports(path, module_level_only=False) & FORBIDDEN
        assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


def test_benchmark_records_is_torch_free_at_import() -> None:
    # env.py may import torch lazily inside collect_env() (run by the runner only); nothing at
    # module level may
    for path in sorted((REPO / "benchmark" / "records").glob("*.py")):
        bad = _imports(path, module_level_only=True) & FORBIDDEN
        assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)} at module level"


def test_a_real_build_loads_no_torch(tmp_path: Path) -> None:
    code = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from tests.leaderboard.lb_factory import standard_records, write_records
from pathlib import Path
write_records(Path({str(tmp_path / "res")!r}), standard_records())
from leaderboard.site import build_site
build_site([{str(tmp_path / "res")!r}], {str(tmp_path / "site")!r})
import benchmark.records, benchmark.records.store, benchmark.records.reference, benchmark.records.migrate
bad = sorted(m for m in sys.modules if m.split(".")[0] in {sorted(FORBIDDEN)!r})
assert not bad, bad
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr
