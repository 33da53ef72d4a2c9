"""Shared fixtures for end-to-end grid runs: a tiny grid on 8×8 digits and its uninterrupted
local-run records."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmark.launchers.options import RunOptions
from tests.cell_cache import shared_once

REPO = Path(__file__).resolve().parents[2]

# 2 seeds × 2 task lists: 4 cells, 2 pre-trainings (cells that differ only in tasks share one), 3
# rounds each
TINY_GRID = """\
name: tiny_launch
description: 4 cells on 8x8 digits; pairs share a pre-training
base:
  dataset: {name: digits, size: 8}
  backbone: {name: resnet_micro, width: 4}
  partition: iid
  fl: {num_clients: 2, participation: 1.0, rounds: 3, local_epochs: 1}
method_common: {batch_size: 32}
axes:
  method: [fedavg_simclr]
  seed: [0, 1]
  tasks: [[knn], [knn, {name: linear_probe, epochs: 1}]]
"""


def write_tiny_grid(folder: Path) -> Path:
    path = folder / "tiny_launch.yaml"
    path.write_text(TINY_GRID)
    return path


def comparable(record: Any) -> dict[str, Any]:
    """Everything in a record that must not depend on where or how often the cell ran."""
    return {
        "cell_id": record.cell_id,
        "status": record.status,
        "rounds": record.rounds_completed,
        "final_state_digest": record.final_state_digest,
        "partition_digest": record.partition_digest,
        "comm": (
            record.comm.bytes_up,
            record.comm.bytes_down,
            tuple(record.comm.per_round_up),
            tuple(record.comm.per_round_down),
        ),
        "scores": sorted((s.card.card_id, tuple(sorted(s.values.items()))) for s in record.scores),
    }


def records_of(cells: Any, root: Path) -> dict[str, dict[str, Any]]:
    from benchmark.records.store import read_record
    from benchmark.runroot.rundir import RunDir

    return {c.cell_id: comparable(read_record(RunDir.of(c, root).record_path)) for c in cells}


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        WANDB_MODE="disabled",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
    )
    return env


def run_cli(*args: str, **kw: Any) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "benchmark", *args],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> Any:
    """One intra-op thread per process: on a busy 2-core machine, 2 OMP threads per process made a
    cell ~30× slower. Children (submitit local jobs, CLI subprocesses) inherit OMP_NUM_THREADS; Ray
    sets it from num_cpus."""
    import torch

    before, env_before = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    yield
    torch.set_num_threads(before)
    if env_before is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = env_before


@pytest.fixture(scope="session")
def tiny_grid(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    from benchmark.grids.expand import expand_grid, load_grid

    path = write_tiny_grid(tmp_path_factory.mktemp("grid"))
    return path, expand_grid(load_grid(str(path)))


@pytest.fixture(scope="session")
def tiny_reference(
    tiny_grid: tuple[Path, list[Any]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """The uninterrupted local run of the tiny grid, in this process; once per session, whichever
    xdist worker asks first (tests/cell_cache.py), read by the launcher and fault-tolerance tests
    of both workers."""
    from benchmark.launchers.local import LocalLauncher

    path, cells = tiny_grid

    def run(root: Path) -> None:
        outcomes = list(
            LocalLauncher(options=RunOptions(device="cpu"), workers=1).launch(
                cells, root, grid="tiny_launch"
            )
        )
        assert [o.status for o in outcomes] == ["done"] * len(cells), outcomes

    blob = json.dumps([c.to_dict() for c in cells], sort_keys=True, default=str)
    key = "tiny-reference-" + hashlib.sha256(blob.encode()).hexdigest()[:20]
    return records_of(cells, shared_once(key, tmp_path_factory, run))
