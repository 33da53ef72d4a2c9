"""Direct-hook harness for the FedU / FedEMA / FeatARC tests: a real method and real digits clients,
hooks called by hand so a test can place a client in any state (not a test module itself)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from benchmark.data.datasets import load_dataset_splits
from benchmark.engine.rounds import SimSettings, client_context, server_context
from benchmark.engine.stages import build_method, build_partition, client_datasets, input_spec
from tests.helpers import smoke_cell


@dataclasses.dataclass
class Kit:
    method: Any
    clients: list
    settings: SimSettings

    def ctx(self, r: int, k: int, epochs: int | None = None):
        c = client_context(self.settings, r, k, None)
        return c if epochs is None else dataclasses.replace(c, local_epochs=epochs)

    def sctx(self, r: int):
        return server_context(self.settings, r, None)

    def server(self):
        return self.method.init_server(self.sctx(0))


def make_kit(
    name: str,
    *,
    clients: int = 8,
    rounds: int = 4,
    method_params: dict | None = None,
    backbone: dict | None = None,
    **extra: Any,
) -> Kit:
    if backbone is not None:
        extra["backbone"] = backbone
    cell = smoke_cell(name, clients=clients, rounds=rounds, method_params=method_params, **extra)
    ds = load_dataset_splits(cell.dataset.name, dict(cell.dataset.params))
    part = build_partition(cell, ds.train.labels)
    method = build_method(cell, input_spec(ds))
    data = client_datasets(method, ds, part)
    s = SimSettings(
        seed=cell.seed,
        num_rounds=rounds,
        local_epochs=1,
        per_round=clients,
        device=torch.device("cpu"),
        num_classes=ds.num_classes,
    )
    return Kit(method, data, s)


def equal(a: dict, b: dict, prefix: str = "") -> bool:
    keys = [k for k in a if k.startswith(prefix)]
    return bool(keys) and all(torch.equal(a[k], b[k]) for k in keys)
