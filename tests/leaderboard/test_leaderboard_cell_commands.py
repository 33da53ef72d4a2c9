"""Each cell page prints the command that re-makes its record and the one that checks it: the
benchmark's own command line accepts both, and both select exactly that cell."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from benchmark.cli import _parser
from benchmark.commands.run import load_cells, parse_seeds
from benchmark.records.schema import from_json
from leaderboard.formatting import cell_commands
from leaderboard.pages import shipped_grids

REPO = Path(__file__).resolve().parents[2]


def _shipped_record(seed: int):
    """The first shipped quickstart record (by file name) of ``seed``."""
    for path in sorted((REPO / "results" / "records").rglob("*.json")):
        if path.parent.name == "records":
            continue  # the kernel fingerprint beside the records
        r = from_json(path.read_text(encoding="utf-8"))
        if r.seed == seed and r.grid == "quickstart":
            return r
    raise AssertionError(f"no shipped quickstart record of seed {seed}")


@pytest.mark.parametrize("seed", [0, 2])
def test_the_printed_commands_select_exactly_the_record(seed: int) -> None:
    r = _shipped_record(seed)
    cmds = cell_commands(r.grid, r.cell_id, r.seed, shipped_grids())
    assert cmds is not None
    for kind in ("run", "verify"):
        argv = shlex.split(cmds[kind])
        assert argv[:3] == ["python", "-m", "benchmark"] and argv[3] == kind
        args = _parser().parse_args(argv[3:])  # what `python -m benchmark` parses
        assert args.command == kind
        _, cells = load_cells(args.grid, only=args.only, seeds=parse_seeds(args.seeds))
        assert [c.cell_id for c in cells] == [r.cell_id], kind


@pytest.mark.parametrize(
    ("grid", "cell_id", "seed"),
    [
        ("../etc/quickstart", "37df683edcf1b329", 0),  # a path, not a grid name
        ("quickstart; rm -rf ~", "37df683edcf1b329", 0),
        ("quickstart", "37df683edcf1b329 --root /", 0),
        ("quickstart", "37df683edcf1b329", True),
        ("my_private_grid", "37df683edcf1b329", 0),  # a grid this repository does not ship
        (None, "37df683edcf1b329", 0),
    ],
)
def test_no_command_for_a_record_no_command_line_can_name(grid, cell_id, seed) -> None:
    assert cell_commands(grid, cell_id, seed, shipped_grids()) is None
