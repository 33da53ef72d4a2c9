"""``benchmark/toolkit/local_train.py``: the client's local loop reads the step losses from the
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
