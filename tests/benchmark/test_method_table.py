"""methods/README.md lists every registered in-tree method and every ``# DEVIATION:`` of its
file."""

from __future__ import annotations

from pathlib import Path

from benchmark.commands.method_table import (
    BEGIN,
    END,
    README,
    deviations,
    in_tree_rows,
    render,
    write,
)


def test_every_registered_method_has_a_row_with_its_deviations() -> None:
    text = README.read_text(encoding="utf-8")
    rows = in_tree_rows()
    assert {"fedavg_simclr", "no_pretrain"} <= {r.name for r in rows}
    missing = [r.name for r in rows if f"| `{r.name}` |" not in text]
    assert not missing, (
        f"methods/README.md lacks {missing}: python -m benchmark.commands.method_table --write"
    )
    for r in rows:
        for line, _ in r.deviations:
            assert f"({Path(r.file).name}#L{line})" in text, (
                f"{r.file}:{line} DEVIATION is not in methods/README.md: python -m benchmark.commands.method_table --write"
            )


def test_deviation_grep_joins_continuation_lines(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "x = 1  # DEVIATION: the paper does A;\n# we do B because C.\ny = 2\n# not a deviation\n"
    )
    assert deviations(src) == [(1, "the paper does A; we do B because C.")]


def test_write_replaces_only_the_generated_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n{BEGIN}\nold\n{END}\n\noutro\n")
    write(readme)
    text = readme.read_text()
    assert (
        text.startswith("intro\n\n")
        and text.endswith("\n\noutro\n")
        and render(in_tree_rows()) in text
    )


# ---- the version lock ----------------------------------------------------------------------------
def _tree(root: Path, shared_body: str, method_body: str = "") -> None:
    (root / "methods" / "_shared").mkdir(parents=True, exist_ok=True)
    (root / "methods" / "_shared" / "maths.py").write_text(shared_body)
    (root / "methods" / "_shared" / "unused.py").write_text("X = 1\n")
    (root / "methods" / "_shared" / "step.py").write_text(
        "from methods._shared.maths import scale\n\ndef step(x):\n    return scale(x)\n"
    )
    (root / "methods" / "toy.py").write_text(
        method_body
        or "import torch\n\n"
        "def run(x):\n    from methods._shared.step import step\n"
        "    return step(x)\n"
    )


def test_code_digest_follows_shared_imports_and_ignores_comments_and_docstrings(
    tmp_path: Path,
) -> None:
    from benchmark.commands.method_table import code_digest, module_digests

    base = "def scale(x):\n    return 2 * x\n"
    _tree(tmp_path, base)
    first = module_digests("methods.toy", tmp_path)
    # the function-level import is followed, transitively; third-party and unimported modules are
    # not part of it
    assert set(first) == {"methods.toy", "methods._shared.step", "methods._shared.maths"}
    _tree(
        tmp_path,
        '"""Module doc."""\n\n\ndef scale(x):  # a comment\n    """Doubles."""\n    return 2 * x\n',
    )
    assert module_digests("methods.toy", tmp_path) == first
    _tree(tmp_path, "def scale(x):\n    return 3 * x\n")  # a numbers-changing edit two imports away
    moved = module_digests("methods.toy", tmp_path)
    assert code_digest(moved) != code_digest(first)
    assert {m for m in moved if moved[m] != first[m]} == {"methods._shared.maths"}


def _edit_lock(tmp_path: Path, edit) -> list[str]:
    import json

    from benchmark.commands.method_table import lock_problems, write_lock

    lock = tmp_path / "versions.lock.json"
    write_lock(lock)
    assert lock_problems(lock) == []
    data = json.loads(lock.read_text())
    edit(data)
    lock.write_text(json.dumps(data))
    return lock_problems(lock)


def test_lock_problems_say_bump_or_refresh(tmp_path: Path, monkeypatch) -> None:
    import functools

    from benchmark.commands import method_table
    from benchmark.commands.method_table import LOCK_COMMAND

    # the tree's lock entries (every in-tree method's module digests) read once: the tree does not
    # change within the test, and each write and check read them again (15 times, 0.6 s each)
    monkeypatch.setattr(method_table, "lock_entries", functools.cache(method_table.lock_entries))

    # as if methods/_shared/simclr.py had changed since the lock was written
    def code_moved(data: dict) -> None:
        entry = data["fedavg_simclr"]
        entry["modules"]["methods._shared.simclr"] = "0" * 16
        entry["code"] = "0" * 16

    (problem,) = _edit_lock(tmp_path, code_moved)
    from benchmark.contracts.registries import METHODS, load_builtins

    load_builtins()
    version = METHODS.get("fedavg_simclr").version
    assert problem.startswith(
        f"fedavg_simclr: its code changed (methods._shared.simclr) but its version is still '{version}'"
    )
    assert "Bump the version" in problem and problem.endswith(LOCK_COMMAND)

    def version_moved(data: dict) -> None:
        data["fedu"]["version"] = "0"

    (problem,) = _edit_lock(tmp_path, version_moved)
    fedu = METHODS.get("fedu").version
    assert problem.startswith(f"fedu: version '0' -> '{fedu}'") and problem.endswith(LOCK_COMMAND)
    problems = _edit_lock(tmp_path, lambda data: data.pop("orchestra"))
    assert problems == [f"orchestra: not in versions.lock.json; add it: {LOCK_COMMAND}"]
