"""Every registered method, generated from the registry (docs/design.md §4.11): a real 2-client cell
on digits, resume equivalence (interrupted + resumed == straight through, which catches state hidden
in the method object), and determinism (same cell twice → identical final state)."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.records.files import read_record
from benchmark.records.schema import from_json, to_json
from tests.cell_cache import cached_run
from tests.helpers import assert_same_numbers, run_straight_and_resumed, smoke_cell
from tests.methods.small_data import SMALL_DIGITS

load_builtins()
ALL_METHODS = METHODS.names()


@pytest.fixture(scope="session")
def smoke_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    """name → (record, run root) of each method's smoke cell, run once per session (tests/
    cell_cache.py). Session-scoped, so pytest-xdist spreads the methods over its workers (a
    module-scoped fixture keeps its tests on one worker, tests/conftest.py); a worker copies a run
    the other made."""
    return _Runs(tmp_path_factory)


class _Runs(dict):
    def __init__(self, factory: pytest.TempPathFactory) -> None:
        super().__init__()
        self.factory = factory

    def __missing__(self, name: str) -> tuple[Any, Path]:
        # run once per session (tests/cell_cache.py): test_accept and the FedAvg-SimCLR byte
        # formula read the same cell
        root = self.factory.mktemp(f"smoke-{name}")
        cell = smoke_cell(name)
        cached_run(cell, root, self.factory)
        self[name] = (read_record(root / name / cell.cell_id / "record.json"), root)
        return self[name]


@pytest.mark.parametrize("name", ALL_METHODS)
def test_two_clients_one_round(name: str, smoke_runs: dict) -> None:
    record, tmp_path = smoke_runs[name]
    assert record is not None and record.status == "ok", record and record.reason
    assert record.rounds_completed == 1
    # budgets (issue 39): epochs are counted where an optimizer step was taken (a reference point
    # that trains nothing counts none), and every step draws at least one sample
    c = record.compute
    assert (c.client_epochs == 0) == (c.client_steps == 0)
    assert c.client_samples >= c.client_steps and (c.client_samples == 0) == (c.client_steps == 0)
    cls = METHODS.get(name)
    if getattr(cls, "payload_up", ()):
        assert record.comm.bytes_up > 0
    assert {s.task for s in record.scores} == {"knn", "linear_probe"}
    for s in record.scores:
        assert all(math.isfinite(v) for v in s.values.values())
    assert from_json(to_json(record)) == record
    assert (tmp_path / name / record.cell_id / "record.json").exists()


class Reads(Mapping):
    """A mapping that logs every key read from it (``where``, key)."""

    def __init__(self, data: Mapping[str, torch.Tensor], log: set, where: str) -> None:
        self.data, self.log, self.where = dict(data), log, where

    def __getitem__(self, key: str) -> torch.Tensor:
        self.log.add((self.where, key))
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


def _changed(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    flat = out.view(-1)
    flat[0] = (~flat[0]) if t.dtype == torch.bool else flat[0] + 1
    return out


@pytest.mark.parametrize("name", ALL_METHODS)
def test_the_final_state_digest_covers_every_tensor_the_evaluation_reads(
    name: str, smoke_runs: dict
) -> None:
    """Issue 39: FedMAE's digest covered ``server.model`` (θ₀, never changed) and not the block pool
    its encoder is built from (``server.extra``), so a checkpoint check bound nothing trained. The
    encoder is exported from the smoke cell's final state with every tensor read logged; changing
    any tensor read must change the record's ``final_state_digest``."""
    from benchmark.contracts.types import ClientState, ServerState
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.pretrained import Pretrained, evaluated_state_digest
    from benchmark.engine.stages import build_method, export_encoder, input_spec
    from benchmark.runroot.rundir import RunDir

    record, root = smoke_runs[name]
    pre = Pretrained.load(RunDir.of(smoke_cell(name), root).pretrain.final)
    assert pre.state_digest() == record.final_state_digest
    log: set = set()
    server = ServerState(
        model=Reads(pre.server.model, log, "model"), extra=Reads(pre.server.extra, log, "extra")
    )
    clients = {
        k: ClientState(tensors=Reads(v, log, f"client {k}")) for k, v in pre.client_tensors.items()
    }
    cell = smoke_cell(name)
    method = build_method(
        cell, input_spec(load_dataset_splits("digits", dict(cell.dataset.params)))
    )
    export_encoder(method, server, clients)
    state = {
        "model": dict(pre.server.model),
        "extra": dict(pre.server.extra),
        **{f"client {k}": dict(v) for k, v in pre.client_tensors.items()},
    }
    read = sorted((where, key) for where, key in log if state[where][key].numel())
    if not any(t.numel() for part in state.values() for t in part.values()):
        # a method that keeps no tensor (pixels: the input itself) has nothing for the digest to
        # cover, and then its encoder must hold no parameter either
        assert not list(export_encoder(method, server, clients).module.parameters()), name
        return
    assert read, f"{name}'s encoder read no tensor of its final state"
    for where, key in read:
        edited = {w: dict(t) for w, t in state.items()}
        edited[where][key] = _changed(edited[where][key])
        digest = evaluated_state_digest(
            ServerState(model=edited["model"], extra=edited["extra"]),
            {k: edited[f"client {k}"] for k in pre.client_tensors},
        )
        assert digest != record.final_state_digest, (
            f"{name}: its evaluation reads {where} {key!r}, which final_state_digest does not cover"
        )


@pytest.mark.parametrize("name", ALL_METHODS)
def test_accept_sizes_the_encoder_on_the_meta_device_as_it_is_built(
    name: str, smoke_runs: dict
) -> None:
    """accept sizes the encoder a record's cell builds on PyTorch's meta device before building it
    (benchmark.submission.bounds, issue 39): for an honest checkpoint of every method the sized
    encoder has the real one's fingerprint and bytes, and nothing of it holds data."""
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.pretrained import Pretrained
    from benchmark.engine.stages import build_method, export_encoder, input_spec
    from benchmark.runroot.rundir import RunDir
    from benchmark.submission.bounds import encoder_bytes, sized_encoder

    record, root = smoke_runs[name]
    cell = smoke_cell(name)
    pre = Pretrained.load(RunDir.of(cell, root).pretrain.final)
    sized = sized_encoder(record, pre, None)
    inputs = input_spec(load_dataset_splits("digits", dict(cell.dataset.params)))
    real = export_encoder(build_method(cell, inputs), pre.server, pre.client_states())
    assert sized.fingerprint == real.fingerprint == record.backbone_fingerprint
    assert encoder_bytes(sized) == encoder_bytes(real)
    assert encoder_bytes(real) > 0 or not list(real.module.parameters())  # pixels has none
    assert all(p.is_meta for p in sized.module.parameters())


@pytest.mark.parametrize("name", ALL_METHODS)
def test_resume_equivalence(name: str, tmp_path: Path) -> None:
    # a quarter of the train split (tests/methods/small_data.py): resume == straight is about the
    # state carried over the kill, whatever each client trains on; 2 of 3 clients a round keeps a
    # client sampled in both rounds (its state across the kill) and one left out (stale state)
    cell = smoke_cell(
        name, rounds=2, clients=3, participation=0.67, tasks=["knn"], dataset=SMALL_DIGITS
    )
    straight, resumed = run_straight_and_resumed(cell, tmp_path)
    assert_same_numbers(resumed, straight)


@pytest.mark.parametrize("name", ALL_METHODS)
def test_payload_names_are_declared(name: str) -> None:
    """Every tensor a method sends matches its declared ``payload_up`` / ``payload_down``
    patterns."""
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.rounds import SimSettings, client_context, server_context
    from benchmark.engine.stages import build_method, build_partition, client_datasets, input_spec

    # a quarter of the train split (tests/methods/small_data.py): the names a client sends do not
    # depend on how many images it trained on
    cell = smoke_cell(name, dataset=SMALL_DIGITS)
    ds = load_dataset_splits("digits", dict(cell.dataset.params))
    part = build_partition(cell, ds.train.labels)
    method = build_method(cell, input_spec(ds))
    clients = client_datasets(method, ds, part)
    public = None
    if part.public_indices is not None:
        from benchmark.contracts.unlabeled_view import UnlabeledView

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
