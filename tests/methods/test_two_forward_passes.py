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
from tests.methods.small_data import SMALL_DIGITS

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
    # a quarter of the train split (tests/methods/small_data.py): what BatchNorm sees is decided
    # per step, and every client still takes several steps
    cell = smoke_cell(name, rounds=2 if name == "orchestra" else 1, tasks=[], dataset=SMALL_DIGITS)
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


class _FirstLoss(Exception):
    """Stops a client step at its first loss: what it was called with is all the test reads."""


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("fedavg_simclr", "methods.fedavg_simclr"),
        ("central_ssl", "methods.baselines"),
        ("local_ssl", "methods.baselines"),
        ("flesd", "methods.flesd"),
    ],
)
def test_the_step_loss_pairs_the_two_views_of_each_image(
    name: str, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client step's contrastive loss (written in the method's own file, issue 58) is
    loss(net(v1), net(v2)) of the two views ``two_views`` draws from the round's generator: view 1
    against view 2, each the network's output of that view alone, at the configured τ; not a view
    against itself, not one pass over the 2B views."""
    import dataclasses
    import importlib

    from methods._shared import losses
    from tests.methods.byol_testkit import make_kit

    method_file = importlib.import_module(module)
    drawn: list[tuple[torch.Tensor, torch.Tensor]] = []
    real_views = method_file.two_views

    def spy_views(*args, **kwargs):
        drawn.append(real_views(*args, **kwargs))
        return drawn[-1]

    passes: list[tuple[object, object]] = []  # (input, output) of every module's forward
    seen: list[tuple[torch.Tensor, torch.Tensor, float]] = []

    def loss(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
        seen.append((z1, z2, tau))
        raise _FirstLoss

    monkeypatch.setattr(method_file, "two_views", spy_views)
    kit = make_kit(name, clients=2, rounds=1)
    m = kit.method
    form = m.cfg.local_loss if name == "flesd" else m.cfg.loss_form
    tau = m.cfg.local_tau if name == "flesd" else m.cfg.tau
    monkeypatch.setitem(losses.CONTRASTIVE_LOSSES, form, loss)
    server = kit.server()
    ctx = dataclasses.replace(kit.ctx(1, 0), public=kit.clients[0].train)
    handle = nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: passes.append((args[0], out))
    )
    try:
        with pytest.raises(_FirstLoss):
            m.client_update(
                m.broadcast(server, kit.sctx(1)), m.init_client(0, server), kit.clients[0], ctx
            )
    finally:
        handle.remove()
    ((z1, z2, got_tau),) = seen
    ((v1, v2),) = drawn
    assert got_tau == tau and v1.shape == v2.shape and not torch.equal(v1, v2)
    assert any(x is v1 and out is z1 for x, out in passes), "z1 is not the network's output of v1"
    assert any(x is v2 and out is z2 for x, out in passes), "z2 is not the network's output of v2"
