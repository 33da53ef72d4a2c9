"""Every registered method, generated from the registry (docs/design.md §4.11): a real 2-client cell
on digits, resume equivalence (interrupted + resumed == straight through, which catches state hidden
in the method object), and determinism (same cell twice → identical final state)."""

from __future__ import annotations

import fnmatch
import math
from pathlib import Path

import pytest
import torch

from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.engine.runner import run_cell
from benchmark.records.schema import from_json, to_json
from tests.helpers import assert_same_numbers, run_straight_and_resumed, smoke_cell

load_builtins()
ALL_METHODS = METHODS.names()


@pytest.mark.parametrize("name", ALL_METHODS)
def test_two_clients_one_round(name: str, tmp_path: Path) -> None:
    record = run_cell(smoke_cell(name), tmp_path, device="cpu")
    assert record is not None and record.status == "ok", record and record.reason
    assert record.rounds_completed == 1
    cls = METHODS.get(name)
    if getattr(cls, "payload_up", ()):
        assert record.comm.bytes_up > 0
    assert {s.task for s in record.scores} == {"knn", "linear_probe"}
    for s in record.scores:
        assert all(math.isfinite(v) for v in s.values.values())
    assert from_json(to_json(record)) == record
    assert (tmp_path / name / record.cell_id / "record.json").exists()


@pytest.mark.parametrize("name", ALL_METHODS)
def test_resume_equivalence(name: str, tmp_path: Path) -> None:
    cell = smoke_cell(name, rounds=2, clients=3, participation=0.67, tasks=["knn"])
    straight, resumed = run_straight_and_resumed(cell, tmp_path)
    assert_same_numbers(resumed, straight)


@pytest.mark.parametrize("name", ALL_METHODS)
def test_payload_names_are_declared(name: str) -> None:
    """Every tensor a method sends matches its declared ``payload_up`` / ``payload_down``
    patterns."""
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.rounds import SimSettings, client_context, server_context
    from benchmark.engine.stages import build_method, build_partition, client_datasets, input_spec

    cell = smoke_cell(name)
    ds = load_dataset_splits("digits", dict(cell.dataset.params))
    part = build_partition(cell, ds.train.labels)
    method = build_method(cell, input_spec(ds))
    clients = client_datasets(method, ds, part)
    public = None
    if part.public_indices is not None:
        from benchmark.contracts.views import UnlabeledView

        public = UnlabeledView(
            ds.train.images[torch.as_tensor(part.public_indices)], ds.mean, ds.std
        )
    s = SimSettings(
        seed=0,
        num_rounds=1,
        local_epochs=1,
        per_round=1,
        device=torch.device("cpu"),
        num_classes=ds.num_classes,
    )
    server = method.init_server(server_context(s, 0, public))
    down = method.broadcast(server, server_context(s, 1, public))
    up, _ = method.client_update(
        down, method.init_client(0, server), clients[0], client_context(s, 1, 0, public)
    )
    for names, patterns in ((down.tensors, method.payload_down), (up.tensors, method.payload_up)):
        for key in names:
            assert any(fnmatch.fnmatch(key, p) for p in patterns), (
                f"{key} not declared in {patterns}"
            )
