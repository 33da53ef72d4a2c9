"""W&B: an offline run is written under the cell directory and holds the record's final scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmark.engine.runner import run_cell
from benchmark.engine.tracking import WandbTracker, wandb_mode
from tests.helpers import smoke_cell


def test_offline_without_api_key(monkeypatch) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", "/nonexistent")
    monkeypatch.setenv("HOME", "/nonexistent")
    assert wandb_mode() == "offline"


def test_offline_run_holds_final_scores(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    record = run_cell(
        smoke_cell("no_pretrain", tasks=["knn"]),
        tmp_path / "runs",
        device="cpu",
        tracker=WandbTracker(project="fssl-bench-test"),
    )
    assert record.tracking is not None and record.tracking.run_id == record.cell_id
    runs = list(
        (tmp_path / "runs").rglob(f"offline-run-*-{record.cell_id}/run-{record.cell_id}.wandb")
    )
    assert runs, "no offline W&B run folder was written"
    # The offline run file is a log of protobuf records; summary items carry the key and the value
    # as JSON text.
    data = runs[0].read_bytes()
    assert b"knn/top1" in data
    assert json.dumps(record.score("knn").values["top1"]).encode() in data
