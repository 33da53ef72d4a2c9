"""benchmark/engine/rounds.py with a method's ``upload_fold``: each upload is folded as its client
finishes and freed, so a round holds one model-sized sum instead of an upload per sampled client,
and the numbers are those of collecting every upload for ``server_aggregate``."""

from __future__ import annotations

import weakref
from pathlib import Path

import pytest

from benchmark.engine.client_store import state_digest
from benchmark.engine.rounds import simulate
from benchmark.engine.stages import prepare
from tests.helpers import smoke_cell


def run(method_name: str, tmp: Path, *, fold: bool, wrap=None):
    from benchmark.engine.stages import build_method

    # 3 of 12 clients a round (each a twelfth of the data; before, 3 of 4 with a quarter each): a
    # round still folds several uploads, one after another, which is what is compared and freed
    setup = prepare(smoke_cell(method_name, rounds=2, clients=12, participation=0.25))
    method = build_method(setup.cell, setup.inputs)
    if not fold:
        # the engine collects every upload instead
        method.upload_fold = lambda server, sizes, ctx: None
    if wrap is not None:
        method = wrap(method)
    return simulate(method, setup.clients, setup.settings, tmp, public=setup.public)


@pytest.mark.parametrize("name", ["fedavg_simclr", "dec_sl"])
def test_folding_the_uploads_moves_no_number(name: str, tmp_path: Path) -> None:
    folded = run(name, tmp_path / "fold", fold=True)
    collected = run(name, tmp_path / "all", fold=False)
    assert state_digest(folded.server.model) == state_digest(collected.server.model)
    assert list(folded.server.model) == list(collected.server.model)
    keep = ("loss", "bytes_up", "bytes_down", "client_steps", "clients")
    assert [{k: h[k] for k in keep} for h in folded.history] == [
        {k: h[k] for k in keep} for h in collected.history
    ]


class _Watch:
    """Forwards to a method; remembers weak references to every uploaded tensor and, at each client
    update, counts the earlier uploads' tensors still alive."""

    def __init__(self, method) -> None:
        self._m = method
        self.refs: list[weakref.ref] = []
        self.alive_at_start: list[int] = []

    def __getattr__(self, item):
        return getattr(self._m, item)

    def client_update(self, down, state, data, ctx):
        self.alive_at_start.append(sum(r() is not None for r in self.refs))
        up, new_state = self._m.client_update(down, state, data, ctx)
        self.refs += [weakref.ref(t) for t in up.tensors.values()]
        return up, new_state


def test_the_engine_frees_each_upload_once_folded(tmp_path: Path) -> None:
    watch = {}

    def wrap(m):
        watch["m"] = _Watch(m)
        return watch["m"]

    run("fedavg_simclr", tmp_path / "fold", fold=True, wrap=wrap)
    assert watch["m"].alive_at_start[1:] and set(watch["m"].alive_at_start) == {0}
    # without a fold the round holds them all
    run("fedavg_simclr", tmp_path / "all", fold=False, wrap=wrap)
    assert max(watch["m"].alive_at_start) > 0
