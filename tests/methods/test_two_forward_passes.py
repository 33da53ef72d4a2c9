"""Two views, two forward passes (docs/methods/fedavg_simclr.md §2.2 "z1 = g(f(v1)); z2 = g(f(v2))",
docs/methods/flesd.md §2.6.2, the official code): BatchNorm in training mode never sees the two
views of a batch as one batch of 2B images."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

import benchmark.data.augment as augment_module
from benchmark.api import METHODS
from benchmark.commands.check_method import smoke_cell
from benchmark.engine.stages import prepare, pretrain
from benchmark.runroot.rundir import PretrainDir

TWO_VIEW_METHODS = [
    "fedavg_simclr",
    "central_ssl",
    "local_ssl",
    "featarc",
    "flesd",
    "fedu",
    "fedema",
    "orchestra",
]


class StepLog:
    """Per optimizer step of a local phase: the sizes of the augmented views drawn and of the
    batches every training-mode BatchNorm saw since the previous step."""

    def __init__(self) -> None:
        self.local = False
        self.views: list[int] = []
        self.bn: list[int] = []
        self.steps: list[tuple[list[int], list[int]]] = []

    def bn_hook(self, module: nn.Module, args: tuple) -> None:
        if self.local and isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training:
            self.bn.append(int(args[0].shape[0]))

    def step_hook(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        if self.local:
            self.steps.append((self.views, self.bn))
            self.views, self.bn = [], []


@pytest.mark.parametrize("name", TWO_VIEW_METHODS)
def test_each_local_step_batchnorm_sees_one_view_size(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every BatchNorm batch of a local optimizer step has one augmented view's size (never 2B)."""
    cell = smoke_cell(name, rounds=2 if name == "orchestra" else 1, tasks=[])
    log = StepLog()
    draw = augment_module.draw

    def logged_draw(n: int, *args, **kwargs):
        if log.local:
            log.views.append(int(n))
        return draw(n, *args, **kwargs)

    cls = METHODS.get(name)
    client_update = cls.client_update

    def logged_update(self, *args, **kwargs):
        log.local = True
        try:
            return client_update(self, *args, **kwargs)
        finally:
            log.local = False

    monkeypatch.setattr(augment_module, "draw", logged_draw)  # augment() calls it via its module
    monkeypatch.setattr(cls, "client_update", logged_update)
    handles = [
        nn.modules.module.register_module_forward_pre_hook(log.bn_hook),
        register_optimizer_step_pre_hook(log.step_hook),
    ]
    try:
        pre = pretrain(prepare(cell), PretrainDir(tmp_path))
    finally:
        for handle in handles:
            handle.remove()
    assert pre is not None and pre.status == "ok"
    assert log.steps, "no local optimizer step ran"
    assert any(bn for _, bn in log.steps), "no BatchNorm ran in training mode during a local step"
    for views, bn in log.steps:
        assert len(set(views)) == 1, (name, views)  # one batch size per step, every view of it
        assert set(bn) <= set(views), (name, "BatchNorm saw", sorted(set(bn)), "views of", views[0])


def test_the_step_loss_pairs_the_two_views_of_each_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """contrastive_step's loss is loss(net(v1), net(v2)) of the two views ``two_views`` draws from
    the round's generator: view 1 against view 2, not a view against itself."""
    from types import SimpleNamespace

    from benchmark.api import AugmentConfig, UnlabeledView, two_views
    from methods._shared import contrastive

    g = torch.Generator().manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 5))
    images = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8, generator=g)
    view = UnlabeledView(images, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    seen: list[tuple[torch.Tensor, torch.Tensor, float]] = []

    def loss(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
        seen.append((z1.detach(), z2.detach(), tau))
        return (z1 - z2).pow(2).sum()

    monkeypatch.setitem(contrastive.CONTRASTIVE_LOSSES, "ntxent_2b", loss)
    ctx = SimpleNamespace(generator=torch.Generator().manual_seed(3))
    contrastive.contrastive_step(net, "ntxent_2b", 0.5, AugmentConfig(), view, ctx)(images)
    v1, v2 = two_views(
        images, AugmentConfig(), torch.Generator().manual_seed(3), mean=view.mean, std=view.std
    )
    ((z1, z2, tau),) = seen
    with torch.no_grad():
        assert torch.equal(z1, net(v1)) and torch.equal(z2, net(v2))
    assert tau == 0.5 and not torch.equal(z1, z2)
