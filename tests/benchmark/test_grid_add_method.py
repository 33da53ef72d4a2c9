"""Issue 47: a plugin runs through the track's own grid, not a copy of it:
``run --grid NAME --add-method PLUGIN`` adds the method to the grid's method axis and keeps every
other setting (the cells the grid's track ranks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmark.core.config import ConfigError
from benchmark.grids.expand import expand_grid, load_grid, with_methods

GRID = """
name: tiny
base:
  dataset: digits
  backbone: {name: resnet_micro, width: 4}
  partition: iid
  fl: {num_clients: 2, participation: 1.0, rounds: 1, local_epochs: 1}
  tasks: [knn]
method_common: {batch_size: 16}
axes:
  method: [{name: no_pretrain}]
  seed: [0, 1]
"""


@pytest.fixture()
def grid(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(GRID, encoding="utf-8")
    return path


def test_an_added_method_gets_the_grids_settings(grid: Path) -> None:
    spec = load_grid(grid)
    before = expand_grid(spec)
    cells = expand_grid(with_methods(spec, ["fedavg_simclr"]))
    added = [c for c in cells if c.method.name == "fedavg_simclr"]
    assert len(added) == 2 and len(cells) == 4
    assert {c.cell_id for c in before} <= {c.cell_id for c in cells}  # the grid's own cells kept
    for c in added:
        twin = next(b for b in before if b.seed == c.seed)
        assert (c.dataset, c.partition, c.fl, c.tasks) == (
            twin.dataset,
            twin.partition,
            twin.fl,
            twin.tasks,
        )
        assert dict(c.method.params)["batch_size"] == 16  # method_common reaches it
    with pytest.raises(ConfigError, match="already runs it"):
        with_methods(spec, ["no_pretrain"])


def test_run_dry_run_lists_the_added_methods_cells(grid: Path, tmp_path: Path, capsys) -> None:
    from benchmark.cli import main

    argv = ["run", "--grid", str(grid), "--root", str(tmp_path / "runs"), "--device", "cpu"]
    assert main([*argv, "--add-method", "fedavg_simclr", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("fedavg_simclr") >= 2 and "4 cells in grid 'tiny'" in out
    assert main([*argv, "--add-method", "no_such_method", "--dry-run"]) == 2
