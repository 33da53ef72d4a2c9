"""A cell's numbers depend only on the cell: local, Ray and submitit (debug and local executors)
agree exactly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from benchmark.launchers.options import RunOptions
from tests.integration.conftest import records_of

pytestmark = pytest.mark.slow


def _all_done(outcomes: list[Any], cells: list[Any]) -> None:
    assert sorted(o.cell_id for o in outcomes) == sorted(c.cell_id for c in cells)
    assert {o.status for o in outcomes} == {"done"}, [
        (o.cell_id, o.status, o.error) for o in outcomes
    ]


def test_local_worker_processes_match_the_sequential_run(
    tiny_grid: Any, tiny_reference: Any, tmp_path: Path
) -> None:
    """The default local launcher runs cells in worker processes (one per core): the same records,
    bit for bit."""
    from benchmark.launchers.local import LocalLauncher

    _, cells = tiny_grid
    seen = []
    launcher = LocalLauncher(options=RunOptions(device="cpu"), workers=2)
    outcomes = list(
        launcher.launch(cells, tmp_path, grid="tiny_launch", progress=lambda c, o: seen.append(o))
    )
    _all_done(outcomes, cells)
    assert seen == outcomes
    assert records_of(cells, tmp_path) == tiny_reference


def test_ray_local_cluster_matches_local_run(
    tiny_grid: Any, tiny_reference: Any, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    from benchmark.launchers.ray import RayLauncher

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    _, cells = tiny_grid
    launcher = RayLauncher(num_cpus=2, cpus_per_cell=1, options=RunOptions(device="cpu"))
    seen = []
    outcomes = list(
        launcher.launch(cells, tmp_path, grid="tiny_launch", progress=lambda c, o: seen.append(o))
    )
    _all_done(outcomes, cells)
    assert seen == outcomes  # streamed one by one, as cells finish
    assert records_of(cells, tmp_path) == tiny_reference


@pytest.mark.parametrize("cluster", ["debug", "local"])
def test_submitit_executors_match_local_run(
    cluster: str, tiny_grid: Any, tiny_reference: Any, tmp_path: Path
) -> None:
    pytest.importorskip("submitit")
    from benchmark.launchers.submitit import SubmititLauncher

    _, cells = tiny_grid
    if cluster == "local":
        # one process per job, each importing torch and the registry: the two cells of seed 0 (one
        # pre-training, shared by two jobs at once under array_parallelism=2) rather than all four;
        # the in-process debug executor takes all four
        cells = [c for c in cells if c.seed == 0]
        assert len(cells) == 2 and len({c.pretrain_key for c in cells}) == 1
        tiny_reference = {c.cell_id: tiny_reference[c.cell_id] for c in cells}
    launcher = SubmititLauncher(
        cluster=cluster,
        folder=str(tmp_path / "submitit"),
        timeout_min=10,
        array_parallelism=2,
        options=RunOptions(device="cpu"),
        poll_s=0.5,
    )
    outcomes = list(launcher.launch(cells, tmp_path / "runs", grid="tiny_launch"))
    _all_done(outcomes, cells)
    assert records_of(cells, tmp_path / "runs") == tiny_reference
