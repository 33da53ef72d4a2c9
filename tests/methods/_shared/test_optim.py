"""methods/_shared/optim.py: the round lr and the optimizer state that ``optimizer_state: keep``
carries between rounds (docs/methods/fedavg_simclr.md §2.4, §4); round_lr's milestones are tested in
test_fedavg_simclr.py (§9.5)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from methods._shared.optim import (
    make_optimizer,
    optimizer_tensors,
    restore_optimizer,
    round_lr,
    scheduled_lr,
)


def cfg(**kw) -> SimpleNamespace:
    base = {
        "optimizer": "adam",
        "lr": 1e-2,
        "weight_decay": 1e-6,
        "momentum": 0.9,
        "lr_schedule": "step_rounds",
        "lr_milestones": (0.3, 0.6, 0.9),
        "lr_gamma": 0.3,
    }
    return SimpleNamespace(**{**base, **kw})


def test_scheduled_lr_steps_only_under_step_rounds() -> None:
    step, const = cfg(), cfg(lr_schedule="constant")
    assert [scheduled_lr(step, r, 10) for r in range(1, 11)] == [
        round_lr(1e-2, r, 10, (0.3, 0.6, 0.9), 0.3) for r in range(1, 11)
    ]
    assert scheduled_lr(step, 10, 10) == pytest.approx(1e-2 * 0.3**3)
    assert {scheduled_lr(const, r, 10) for r in range(1, 11)} == {1e-2}


@pytest.mark.parametrize("kind, cls", [("adam", torch.optim.Adam), ("sgd", torch.optim.SGD)])
def test_make_optimizer_kind_and_hyperparameters(kind: str, cls: type) -> None:
    p = nn.Parameter(torch.zeros(3))
    opt = make_optimizer(cfg(optimizer=kind), [p], 0.5)
    group = opt.param_groups[0]
    assert type(opt) is cls and group["lr"] == 0.5 and group["weight_decay"] == 1e-6
    assert kind == "adam" or group["momentum"] == 0.9


def _steps(net: nn.Module, opt: torch.optim.Optimizer, xs: list[torch.Tensor]) -> None:
    for x in xs:
        opt.zero_grad()
        net(x).pow(2).sum().backward()
        opt.step()


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_kept_optimizer_state_continues_the_run_exactly(kind: str) -> None:
    """Stopping after two steps, flattening the state to CPU tensors and restoring it into a fresh
    optimizer gives the same weights after two more steps as never stopping."""
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(4, 3, generator=g) for _ in range(4)]
    torch.manual_seed(0)
    straight = nn.Linear(3, 2)
    resumed = nn.Linear(3, 2)
    resumed.load_state_dict(straight.state_dict())
    opt = make_optimizer(cfg(optimizer=kind), list(straight.parameters()), 1e-2)
    _steps(straight, opt, xs[:2])
    saved = optimizer_tensors(opt)
    assert saved and all(k.startswith("opt.") and v.device.type == "cpu" for k, v in saved.items())
    _steps(straight, opt, xs[2:])
    opt2 = make_optimizer(cfg(optimizer=kind), list(resumed.parameters()), 1e-2)
    _steps(resumed, opt2, xs[:2])
    opt3 = make_optimizer(cfg(optimizer=kind), list(resumed.parameters()), 1e-2)
    # non-opt ignored
    restore_optimizer(opt3, {**saved, "encoder.weight": torch.zeros(1)}, torch.device("cpu"))
    _steps(resumed, opt3, xs[2:])
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)


def test_restore_without_state_is_a_fresh_optimizer() -> None:
    p = nn.Parameter(torch.ones(2))
    opt = make_optimizer(cfg(), [p], 1e-2)
    restore_optimizer(opt, {"encoder.weight": torch.zeros(2)}, torch.device("cpu"))
    assert len(opt.state) == 0
