"""The precision policy (benchmark.core.precision): a cell field, fp16 only with a gradient scaler,
fp32 where the maths needs it — exercised on the CPU, where torch runs bf16 and fp16 autocast and
its GradScaler too."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from benchmark.commands.check_method import smoke_cell
from benchmark.contracts.registries import METHODS, load_builtins
from benchmark.core.config import ConfigError
from benchmark.core.precision import FP32, LossScaler, Precision, PrecisionError, guard_fp16_steps
from benchmark.engine.stages import prepare, pretrain
from benchmark.runroot.rundir import PretrainDir

load_builtins()
# bf16 keeps 8 bits of mantissa: one round's mean loss agrees with fp32 within 5 %
BF16_LOSS_RTOL = 0.05
NO_LOSS = {"no_pretrain", "no_pretrain_bn", "pixels"}  # train nothing: no loss to compare


def _rounds(name: str) -> int:
    # Orchestra's round 1 only initialises its centroids (no loss)
    return 2 if name == "orchestra" else 1


def _history(name: str, precision: str, root: Path) -> list[dict[str, float]]:
    # 2 of 10 clients a round (a fifth of the 2-client cell's steps, 4-5x less CPU): the precision
    # reaches every step of a round however many there are, so the policy shows on a shorter round
    cell = smoke_cell(
        name, rounds=_rounds(name), clients=10, participation=0.2, tasks=[], precision=precision
    )
    prep = prepare(cell)
    pre = pretrain(prep, PretrainDir(root / precision))
    assert pre is not None and pre.status == "ok", pre.reason if pre else None
    return list(pre.history)


@pytest.mark.parametrize("name", METHODS.names())
def test_every_builtin_method_trains_in_every_precision(name: str) -> None:
    assert set(METHODS.get(name).precisions) == {"fp32", "bf16", "fp16", "tf32"}


@pytest.mark.parametrize("name", METHODS.names())
def test_one_bf16_round_is_within_tolerance_of_fp32(name: str, tmp_path: Path) -> None:
    fp32, bf16 = _history(name, "fp32", tmp_path), _history(name, "bf16", tmp_path)
    a, b = fp32[-1]["loss"], bf16[-1]["loss"]
    if name in NO_LOSS:
        assert math.isnan(a) and math.isnan(b)
        return
    assert math.isfinite(a) and math.isfinite(b)
    # bf16 autocast really ran (an identical loss would mean the precision never reached the step)
    assert a != b
    assert abs(a - b) <= BF16_LOSS_RTOL * abs(a), (a, b)


@pytest.mark.parametrize("name", sorted(set(METHODS.names()) - NO_LOSS))
def test_fp16_round_steps_through_the_scaler_and_skips_no_step(name: str, tmp_path: Path) -> None:
    """simulate guards fp16 cells: a step not taken by the LossScaler raises PrecisionError (the
    cell would fail)."""
    hist = _history(name, "fp16", tmp_path)
    last = hist[-1]
    assert math.isfinite(last["loss"])
    assert last.get("scaler_skipped_steps", 0.0) == 0.0, last


def test_an_optimizer_step_outside_the_scaler_fails_in_fp16_only() -> None:
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net(torch.ones(3, 4)).sum().backward()
    with (
        guard_fp16_steps(Precision("fp16")),
        pytest.raises(PrecisionError, match="without the gradient scaler"),
    ):
        opt.step()
    with guard_fp16_steps(Precision("fp16")):
        scaler = Precision("fp16").scaler(torch.device("cpu"))
        scaler.backward(net(torch.ones(3, 4)).sum())
        scaler.step(opt)  # the scaler's step passes
        # declared fp32 maths (Orchestra's server clustering) too
        FP32.scaler(torch.device("cpu")).step(opt)
    with guard_fp16_steps(Precision("bf16")):
        opt.step()  # bf16 needs no scaler
    opt.step()  # the guard is gone after the region


def test_the_fp16_scaler_scales_the_loss_and_skips_a_step_on_inf_gradients() -> None:
    net = torch.nn.Linear(4, 1, bias=False)
    torch.nn.init.ones_(net.weight)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    scaler = Precision("fp16").scaler(torch.device("cpu"))
    assert isinstance(scaler, LossScaler) and scaler.enabled
    loss = net(torch.ones(1, 4)).sum()
    scaler.backward(loss)
    assert net.weight.grad.abs().min() > 1.0  # scaled (the true gradient is 1)
    # unscaled before the step
    assert scaler.step(opt) and torch.allclose(net.weight, torch.full((1, 4), 0.9))
    opt.zero_grad()
    scaler.backward(net(torch.full((1, 4), math.inf)).sum())
    assert (
        not scaler.step(opt)
        and scaler.skipped == 1
        and torch.allclose(net.weight, torch.full((1, 4), 0.9))
    )
    assert not Precision("bf16").scaler(torch.device("cpu")).enabled


def _under_bf16(fn, *args):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return fn(*args)


def test_similarities_sinkhorn_cluster_logits_and_distillation_stay_fp32_under_autocast() -> None:
    """Bitwise equal to the same call outside autocast: the matmuls ran in fp32 (under bf16 autocast
    a matmul of fp32 inputs is cast down, which the explicit ``.float()`` in the losses alone did
    not prevent)."""
    from benchmark.api import ntxent_2b
    from methods._shared.losses import crossview_1dir
    from methods.flesd import similarity_distill_loss, similarity_matrix
    from methods.orchestra import cluster_assignment_loss, sinkhorn_knopp

    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(16, 32, generator=g), torch.randn(16, 32, generator=g)
    c = F.normalize(torch.randn(8, 32, generator=g), dim=1)
    targets = torch.softmax(torch.randn(16, 24, generator=g), dim=1)
    keys = F.normalize(torch.randn(24, 32, generator=g), dim=1)
    cases = [
        (ntxent_2b, (z1, z2, 0.5)),
        (crossview_1dir, (z1, z2, 0.1)),
        (sinkhorn_knopp, (z1 @ c.t(),)),
        (cluster_assignment_loss, (z1, z2, c, 0.1)),
        (similarity_matrix, (z1,)),
        (similarity_distill_loss, (F.normalize(z1, dim=1), keys, targets, 0.1)),
    ]
    for fn, args in cases:
        inside, outside = _under_bf16(fn, *args), fn(*args)
        inside, outside = (
            (inside, outside) if isinstance(inside, tuple) else ((inside,), (outside,))
        )
        for a, b in zip(inside, outside, strict=True):
            assert a.dtype == torch.float32 and torch.equal(a, b), fn.__name__


def test_precision_is_part_of_the_cell_identity_and_validated_at_expansion() -> None:
    fp32, bf16 = smoke_cell("fedavg_simclr"), smoke_cell("fedavg_simclr", precision="bf16")
    assert fp32.precision == "fp32" and bf16.precision == "bf16"
    assert fp32.cell_id != bf16.cell_id and fp32.pretrain_key != bf16.pretrain_key
    assert type(fp32).from_dict(bf16.to_dict()) == bf16
    with pytest.raises(ConfigError, match="precision must be one of fp32, bf16, fp16"):
        smoke_cell("fedavg_simclr", precision="fp8")


def test_a_method_that_declares_only_fp32_is_refused_in_a_bf16_cell(monkeypatch) -> None:
    cls = METHODS.get("fedavg_simclr")
    monkeypatch.setattr(cls, "precisions", ("fp32",))
    with pytest.raises(ConfigError, match="trains in fp32 only"):
        smoke_cell("fedavg_simclr", precision="fp16")
