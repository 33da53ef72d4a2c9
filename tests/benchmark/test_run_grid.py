"""``run_grid``, the programmatic entry point the CLI calls: typed options, a launcher built from
its typed config, finished cells skipped, missing data stopped before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmark.commands.run import build_launcher, run_grid
from benchmark.core.config import ConfigError
from benchmark.core.errors import MissingData
from benchmark.launchers.options import RunOptions

GRID = (
    "name: tiny\nbase: {dataset: {name: digits, size: 8}, backbone: {name: resnet_micro, width: 4},"
    " partition: iid, fl: {num_clients: 2, rounds: 1}, tasks: [knn]}\n"
    "method_common: {batch_size: 32}\naxes: {method: [fedavg_simclr, no_pretrain], seed: [0]}\n"
)


def test_run_grid_runs_then_skips(tmp_path: Path) -> None:
    grid = tmp_path / "tiny.yaml"
    grid.write_text(GRID)
    seen = []
    # in this process (workers=1): what is tested is run-then-skip, not the worker pool
    # (tests/integration/test_launchers_agree.py spawns two); spawned workers each import torch,
    # which was most of this test's 169 s and oversubscribes the cores under pytest-xdist
    first = run_grid(
        str(grid),
        root=tmp_path / "runs",
        options=RunOptions(device="cpu"),
        launcher_config={"workers": 1},
        progress=lambda cell, outcome: seen.append(outcome.status),
    )
    assert (first.cells, first.count("done"), first.skipped, first.failed) == (2, 2, 0, [])
    assert seen == ["done", "done"]
    again = run_grid(
        str(grid),
        root=tmp_path / "runs",
        options=RunOptions(device="cpu"),
        only="method=no_pretrain",
    )
    assert (again.cells, again.skipped, again.outcomes) == (1, 1, ())


def test_missing_data_stops_before_anything_is_written(tmp_path: Path) -> None:
    grid = tmp_path / "c.yaml"
    grid.write_text(GRID.replace("{name: digits, size: 8}", "cifar10"))
    with pytest.raises(MissingData) as err:
        run_grid(
            str(grid), root=tmp_path / "runs", options=RunOptions(data_root=str(tmp_path / "empty"))
        )
    assert err.value.grid == "tiny" and any("cifar10" in line.lower() for line in err.value.lines)
    assert not (tmp_path / "runs").exists()


def test_launchers_are_built_from_typed_configs() -> None:
    opts = RunOptions(device="cpu", threads=1)
    local = build_launcher("local", opts, {"claim_poll_s": 0.5})
    assert local.options is opts and local.claim_poll_s == 0.5
    with pytest.raises(ConfigError, match="claim_pol"):
        build_launcher("local", opts, {"claim_pol_s": 0.5})
    with pytest.raises(ConfigError):
        build_launcher("local", opts, {"claim_poll_s": "fast"})


def test_a_setting_the_data_makes_impossible_stops_at_the_door(tmp_path: Path) -> None:
    """MethodBase.check_data runs in the preflight: FLESD whose queue fills every ESD epoch
    (docs/methods/flesd.md §6 item 10) is refused before any cell runs, not after a round of local
    training."""
    from benchmark.core.errors import UsageError

    grid = tmp_path / "f.yaml"
    grid.write_text(
        GRID.replace(
            "axes: {method: [fedavg_simclr, no_pretrain], seed: [0]}",
            "axes: {method: [{name: flesd, distill_batch_size: 16, queue_size: 4096, "
            "with: {public: {name: holdout, fraction: 0.1}}}], seed: [0]}",
        )
    )
    with pytest.raises(UsageError, match=r"flesd on digits .*ESD would take no step"):
        run_grid(str(grid), root=tmp_path / "runs", options=RunOptions(device="cpu"))
    assert not (tmp_path / "runs").exists()
