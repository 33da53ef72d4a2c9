"""tasks/divergence.py ``LossWatch``: the first non-finite loss (NaN or ±inf), its step, found at the
next check (issue 55: an ``isnan`` check reported an infinite loss late, and as NaN)."""

from __future__ import annotations

import math

import pytest
import torch

from benchmark.api import Diverged
from tasks.divergence import LossWatch


def watch(losses: list[float], every: int = 0) -> LossWatch:
    w = LossWatch("probe", every=every)
    for v in losses:
        w.see(torch.tensor(v))
    return w


def test_a_finite_run_returns_the_last_loss() -> None:
    assert LossWatch("probe").check() is None
    assert watch([3.0, 2.5, 1.25]).check() == 1.25


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_the_first_non_finite_loss_and_its_step_are_reported(bad: float) -> None:
    w = watch([1.0, bad, math.nan, 2.0])
    with pytest.raises(Diverged, match=rf"^probe loss became {bad} at step 2$"):
        w.check()


def test_every_checks_on_the_step_itself() -> None:
    w = LossWatch("probe", every=2)
    w.see(torch.tensor(math.inf))
    with pytest.raises(Diverged, match="became inf at step 1"):
        w.see(torch.tensor(1.0))  # step 2: the periodic check
    quiet = LossWatch("probe")  # every = 0: only an explicit check reads
    for v in (math.inf, 1.0, 1.0):
        quiet.see(torch.tensor(v))
    assert quiet.steps == 3
