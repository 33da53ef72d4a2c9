"""A run starts its cells longest first by their shipped records' times, the copies of shared cells
last (benchmark.launchers.order, issue 53); the order moves no number."""

from __future__ import annotations

import shutil
from pathlib import Path

from benchmark.commands.run import load_cells
from benchmark.engine.sharing import shareable
from benchmark.launchers.order import (
    SHIPPED_RESULTS,
    expected_seconds,
    launch_order,
    longest_first,
)
from benchmark.records.files import read_record
from benchmark.records.schema import to_json
from benchmark.records.store import RESULTS_SUBDIR
from tests.helpers import smoke_cell

DIR = {"name": "dirichlet", "alpha": 0.5}


def _shipped(cell) -> Path:
    return SHIPPED_RESULTS / RESULTS_SUBDIR / cell.method.name / f"{cell.cell_id}.json"


def _class(cell) -> str:
    """The cell but for its partition (the class whose shareable cells copy one computed cell)."""
    return repr(
        {k: v for k, v in cell.to_dict().items() if k not in ("partition", "partition_seed")}
    )


def test_the_quickstart_starts_its_longest_cells_first_and_its_copies_last() -> None:
    _, cells = load_cells("quickstart")
    expected = expected_seconds(cells)
    assert len(expected) == len(cells)  # every cell of the embedded default has a shipped record
    order = launch_order(cells)
    assert sorted(c.cell_id for c in order) == sorted(c.cell_id for c in cells)
    # of each shareable class, the first cell started computes and the others copy it
    seen: set[str] = set()
    copies = []
    for cell in order:
        if shareable(cell):
            if _class(cell) in seen:
                copies.append(cell)
            seen.add(_class(cell))
    assert copies and order[len(order) - len(copies) :] == copies  # the copies last
    computing = order[: len(order) - len(copies)]
    times = [expected[c.cell_id] for c in computing]
    assert times == sorted(times, reverse=True)
    # the grid's own order starts the random ViT's fine-tunings among its last cells; this one ends
    # on cells a tenth as long as its first
    grid_computing = [c for c in cells if c not in copies]
    assert max(expected[c.cell_id] for c in grid_computing[-9:]) > max(times) / 2
    assert max(times[-9:]) * 10 < min(times[:6])


def test_cells_without_a_shipped_record_keep_their_order_ahead_of_the_others() -> None:
    a, b, c, d = (smoke_cell("fedavg_simclr", seed=s) for s in range(4))
    order = longest_first([a, b, c, d], {b.cell_id: 1.0, d.cell_id: 5.0})
    assert [x.cell_id for x in order] == [x.cell_id for x in (a, c, d, b)]
    # no time known: the order handed in
    assert longest_first([d, c, b, a], {}) == [d, c, b, a]
    # a time that is not a number is no time
    order = longest_first([a, b, c], {a.cell_id: float("nan"), b.cell_id: 1.0, c.cell_id: 2.0})
    assert [x.cell_id for x in order] == [x.cell_id for x in (a, c, b)]


def test_copies_keep_their_order_after_every_cell_that_computes(tmp_path: Path) -> None:
    a, a2 = smoke_cell("no_pretrain"), smoke_cell("no_pretrain", partition=DIR)
    b = smoke_cell("fedavg_simclr")
    order = launch_order([a, a2, b], results=tmp_path)  # no records there: the grid's order
    assert [x.cell_id for x in order] == [x.cell_id for x in (a, b, a2)]


def test_a_record_is_read_only_under_its_own_cell_id(tmp_path: Path) -> None:
    _, cells = load_cells("quickstart", only="method=flesd,partition=iid", seeds=[0])
    (cell,) = cells
    other = load_cells("quickstart", only="method=fedu,partition=iid", seeds=[0])[1][0]
    record = read_record(_shipped(cell))
    folder = tmp_path / RESULTS_SUBDIR / other.method.name
    folder.mkdir(parents=True)
    # a record copied under another cell's name does not give that cell a time
    shutil.copyfile(_shipped(cell), folder / f"{other.cell_id}.json")
    # nor does a file that is not a record
    (tmp_path / RESULTS_SUBDIR / "flesd").mkdir()
    (tmp_path / RESULTS_SUBDIR / "flesd" / f"{cell.cell_id}.json").write_text("{not json")
    assert expected_seconds([cell, other], tmp_path) == {}
    # the cell's own record does
    (tmp_path / RESULTS_SUBDIR / "flesd" / f"{cell.cell_id}.json").write_text(to_json(record))
    assert expected_seconds([cell, other], tmp_path) == {cell.cell_id: record.compute.wall_time_s}
