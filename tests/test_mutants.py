"""scripts/mutants.py stays applicable (issue 55): every declared mutant's original snippet occurs
exactly once in its file, differs from its mutant, and names test files that exist, so the mutation
run (scripts/mutation.py, not part of the suite) measures the code as it is."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def harness():
    spec = importlib.util.spec_from_file_location("fssl_mutation", REPO / "scripts" / "mutation.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_declared_mutant_applies() -> None:
    h = harness()
    targets = h.load_targets()
    assert targets and all(t.mutants for t in targets.values())
    assert h.check_applicable(targets) == []


def test_the_check_sees_a_stale_snippet_and_a_missing_test(tmp_path: Path) -> None:
    h = harness()
    name, t = next(iter(h.load_targets().items()))
    m = t.mutants[0]
    (tmp_path / t.file).parent.mkdir(parents=True)
    (tmp_path / t.file).write_text((REPO / t.file).read_text("utf-8").replace(m.original, "x = 1"))
    for test in {x.split("::")[0] for x in (*t.tests, *m.tests)}:
        (tmp_path / test).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / test).write_text("")
    problems = h.check_applicable({name: t}, root=tmp_path)
    assert f"{name}:{m.id}: the original occurs 0 times in {t.file}" in problems
    gone = dataclasses.replace(m, tests=("tests/no_such_test.py",))
    problems = h.check_applicable({name: dataclasses.replace(t, mutants=(gone,))}, root=tmp_path)
    assert f"{name}:{m.id}: no test file tests/no_such_test.py" in problems
