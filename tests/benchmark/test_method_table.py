"""methods/README.md lists every registered in-tree method and every ``# DEVIATION:`` of its file."""

from __future__ import annotations

from pathlib import Path

from benchmark.method_table import BEGIN, END, README, deviations, in_tree_rows, render, write


def test_every_registered_method_has_a_row_with_its_deviations() -> None:
    text = README.read_text(encoding="utf-8")
    rows = in_tree_rows()
    assert {"fedavg_simclr", "no_pretrain"} <= {r.name for r in rows}
    missing = [r.name for r in rows if f"| `{r.name}` |" not in text]
    assert not missing, f"methods/README.md lacks {missing}: python -m benchmark.method_table --write"
    for r in rows:
        for line, _ in r.deviations:
            assert f"({Path(r.file).name}#L{line})" in text, (
                f"{r.file}:{line} DEVIATION is not in methods/README.md: python -m benchmark.method_table --write")


def test_deviation_grep_joins_continuation_lines(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("x = 1  # DEVIATION: the paper does A;\n# we do B because C.\ny = 2\n# not a deviation\n")
    assert deviations(src) == [(1, "the paper does A; we do B because C.")]


def test_write_replaces_only_the_generated_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n{BEGIN}\nold\n{END}\n\noutro\n")
    write(readme)
    text = readme.read_text()
    assert text.startswith("intro\n\n") and text.endswith("\n\noutro\n") and render(in_tree_rows()) in text
