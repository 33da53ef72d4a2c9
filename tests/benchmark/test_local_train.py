"""``benchmark/building_blocks/local_train.py``: the client's local loop reads the step losses from the
device once per update under the project's non-finite policy ("raise"), every step only where the
policy must decide before the step ("skip")."""

from __future__ import annotations

import math

import pytest
import torch

from benchmark.api import Diverged, UnlabeledView, run_local_epochs
from benchmark.engine.rounds import SimSettings, client_context


def _setup(values: list[float]):
    """A one-parameter model whose step loss is ``w * 0 + values[i]`` (a real graph, so backward and
    step run)."""
    w = torch.nn.Parameter(torch.zeros(()))
    opt = torch.optim.SGD([w], lr=0.1)
    view = UnlabeledView(torch.zeros(len(values) * 4, 1, 2, 2, dtype=torch.uint8), (0.5,), (0.5,))
    it = iter(values)

    def step(batch: torch.Tensor) -> torch.Tensor:
        return w * 0.0 + torch.tensor(next(it))

    ctx = client_context(
        SimSettings(seed=0, num_rounds=1, local_epochs=1, per_round=1, device=torch.device("cpu")),
        1,
        3,
        None,
    )
    return step, opt, view, ctx


def _count_host_reads(monkeypatch) -> dict[str, int]:
    reads = {"n": 0}
    for name in ("__float__", "item"):
        real = getattr(torch.Tensor, name)

        def spy(self, *a, _real=real, **k):
            reads["n"] += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, spy)
    return reads


def test_raise_reads_the_losses_once_per_update_with_the_same_sum(monkeypatch) -> None:
    values = [1.25, 0.5, 2.0, 0.125]
    step, opt, view, ctx = _setup(values)
    reads = _count_host_reads(monkeypatch)
    stats = run_local_epochs(view, step, opt, ctx, batch_size=4, epochs=1, nan_policy="raise")
    assert reads["n"] == 0  # no float()/item() per step: one stacked copy at the end
    assert stats.steps == 4 and stats.losses == values
    total = 0.0
    for v in values:
        total += v
    assert stats.loss_sum == total and stats.as_dict()["loss"] == total / 4


def test_a_non_finite_loss_still_raises_naming_its_step() -> None:
    step, opt, view, ctx = _setup([1.0, math.nan, 1.0])
    with pytest.raises(Diverged, match=r"non-finite loss nan at client 3, round 1, step 2"):
        run_local_epochs(view, step, opt, ctx, batch_size=4, epochs=1, nan_policy="raise")


def test_skip_reads_each_loss_and_skips_the_non_finite_step(monkeypatch) -> None:
    step, opt, view, ctx = _setup([1.0, math.inf, 3.0])
    reads = _count_host_reads(monkeypatch)
    stats = run_local_epochs(view, step, opt, ctx, batch_size=4, epochs=1, nan_policy="skip")
    assert reads["n"] >= 3  # it must look before each step
    assert (stats.steps, stats.skipped, stats.batches, stats.loss_sum) == (2, 1, 3, 4.0)


@pytest.mark.parametrize(
    ("n", "drop_last", "sizes"),
    [
        (10, True, [10]),  # smaller than a batch: one batch of all of it, whatever drop_last says
        (10, None, [10]),
        (10, False, [10]),
        (16, True, [16]),
        (21, True, [16]),  # a full batch too: the partial one is dropped where the loader drops it
        (21, None, [16]),
        (21, False, [16, 5]),
        (1, True, []),  # one image: no step (BatchNorm, and no negative)
        (1, False, []),
    ],
)
def test_the_small_client_policy_of_the_local_loop(n: int, drop_last, sizes: list[int]) -> None:
    """docs/protocols/small-clients.md: a partial last batch is dropped only when the client also
    has a full one; a client smaller than B trains one batch of all its images each epoch."""
    w = torch.nn.Parameter(torch.zeros(()))
    opt = torch.optim.SGD([w], lr=0.1)
    seen: list[int] = []

    def step(batch: torch.Tensor) -> torch.Tensor:
        seen.append(len(batch))
        return w * 0.0 + 1.0

    view = UnlabeledView(torch.zeros(n, 1, 2, 2, dtype=torch.uint8), (0.5,), (0.5,))
    ctx = client_context(
        SimSettings(seed=0, num_rounds=1, local_epochs=1, per_round=1, device=torch.device("cpu")),
        1,
        0,
        None,
    )
    stats = run_local_epochs(view, step, opt, ctx, batch_size=16, epochs=1, drop_last=drop_last)
    assert seen == sizes and stats.steps == len(sizes) and stats.samples == sum(sizes)


def _first_training_round(name: str, images: int):
    """The uploads of the first round in which ``name`` trains (after its setup rounds), with its
    two smoke clients cut to ``images`` images each."""
    from benchmark.contracts.types import ClientData
    from benchmark.engine.rounds import server_context
    from benchmark.engine.stages import prepare
    from tests.helpers import smoke_cell

    setup = prepare(smoke_cell(name, rounds=3, tasks=[]))
    method, s, public = setup.method, setup.settings, setup.public
    clients = []
    for k in range(len(setup.clients)):
        c = setup.clients[k]
        view = UnlabeledView(c.train.images[:images], c.train.mean, c.train.std)
        labels = None if c.labels is None else c.labels[:images]
        clients.append(ClientData(c.client_id, images, view, labels, c.num_classes))
    server = method.init_server(server_context(s, 0, public))
    states = {c.client_id: method.init_client(c.client_id, server) for c in clients}
    for r in range(1, method.setup_rounds + 2):
        down = method.broadcast(server, server_context(s, r, public))
        ups = {}
        for c in clients:
            ctx = client_context(s, r, c.client_id, public)
            ups[c.client_id], states[c.client_id] = method.client_update(
                down, states[c.client_id], c, ctx
            )
        server = method.server_aggregate(server, ups, server_context(s, r, public), public)
    return ups


def _training_methods() -> list[str]:
    from benchmark.contracts.registries import METHODS, load_builtins

    load_builtins()
    return [n for n in METHODS.names() if METHODS.get(n).pretrains]


@pytest.mark.parametrize("name", _training_methods())
def test_a_client_smaller_than_a_batch_trains_one_batch_in_every_method(name: str) -> None:
    """The one small-client policy (docs/protocols/small-clients.md), method by method: a client of
    12 images, fewer than the smoke batch of every method (16 to 64), takes one step per epoch of
    all 12 images in the first round it trains in, whatever its method's loader does with a
    partial batch (FedU, FedEMA, FedMAE and Orchestra drop it)."""
    ups = _first_training_round(name, 12)
    assert ups and all(u.metrics["steps"] == 1 for u in ups.values()), {
        k: u.metrics.get("steps") for k, u in ups.items()
    }
    assert all(u.metrics["samples"] == 12 for u in ups.values())
