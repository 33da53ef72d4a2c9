"""FedU faithfulness tests: every item of docs/methods/fedu.md §7 (numbers in the comments are the
spec's)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from benchmark.api import ComponentSpec, divergence
from benchmark.engine.rounds import payload_nbytes
from benchmark.engine.runner import run_cell
from methods.fedu import FedU, FedUConfig
from tests.helpers import digits_inputs, smoke_cell
from tests.methods.byol_testkit import equal, make_kit
from tests.methods.small_data import SMALL_DIGITS


def r18_fedu() -> FedU:
    return FedU(FedUConfig(), ComponentSpec("resnet18_cifar", "1", {"width": 64}), digits_inputs())


def test_payload_names_and_resnet18_bytes() -> None:
    """§7.1: 116 tensors, no target, no num_batches_tracked; 153,945,856 B for the ResNet-18
    config."""
    m = r18_fedu()
    from benchmark.engine.rounds import SimSettings, server_context

    s = SimSettings(seed=0, num_rounds=1, local_epochs=0, per_round=1, device=torch.device("cpu"))
    down = m.broadcast(m.init_server(server_context(s, 0, None)), server_context(s, 1, None))
    assert len(down.tensors) == 116
    assert not any(
        k.startswith("target.") or k.endswith("num_batches_tracked") for k in down.tensors
    )
    assert sum(v.numel() for v in down.tensors.values()) == 38_486_464
    assert payload_nbytes(down) == 153_945_856
    assert len(m.divergence_names()) == 17  # §7.2


def test_upload_names_and_examples() -> None:
    kit = make_kit("fedu")
    m = kit.method
    down = m.broadcast(kit.server(), kit.sctx(1))
    up, st = m.client_update(down, m.init_client(0, kit.server()), kit.clients[0], kit.ctx(1, 0, 0))
    assert set(up.tensors) == set(down.tensors)
    assert up.num_examples == kit.clients[0].num_examples
    assert any(k.startswith("target.") for k in st.tensors)


def test_divergence_set_stem_and_excluded_tensors() -> None:
    """§7.2: δ on every stem-conv entry gives D = δ√1728/17; shortcut/BN/projector/predictor leave D
    = 0."""
    m = r18_fedu()
    from benchmark.engine.rounds import SimSettings, server_context

    s = SimSettings(seed=0, num_rounds=1, local_epochs=0, per_round=1, device=torch.device("cpu"))
    base = dict(m.init_server(server_context(s, 0, None)).model)
    names = m.divergence_names()
    delta = 0.01
    stem = dict(base)
    stem["online.backbone.conv1.weight"] = base["online.backbone.conv1.weight"] + delta
    assert base["online.backbone.conv1.weight"].numel() == 1728
    assert math.isclose(divergence(stem, base, names), delta * math.sqrt(1728) / 17, rel_tol=1e-4)
    for key in (
        "online.backbone.layer2.0.downsample.0.weight",
        "online.backbone.bn1.weight",
        "online.projector.0.weight",
        "predictor.0.weight",
        "online.backbone.layer1.0.bn1.running_mean",
    ):
        other = dict(base)
        other[key] = base[key] + 1.0
        assert divergence(other, base, names) == 0.0, key


def test_first_participation_copies_global_and_independent_target() -> None:
    """§7.3 (E = 0)."""
    kit = make_kit("fedu")
    m = kit.method
    down = m.broadcast(kit.server(), kit.sctx(1))
    up, st = m.client_update(down, m.init_client(0, kit.server()), kit.clients[0], kit.ctx(1, 0, 0))
    assert equal(up.tensors, down.tensors)
    for k, v in down.tensors.items():
        if k.startswith("online."):
            t = st.tensors["target." + k[len("online.") :]]
            assert torch.equal(t, v)
            assert t.data_ptr() != st.tensors[k].data_ptr()
    t = st.tensors["target.backbone.conv1.weight"]
    before = st.tensors["online.backbone.conv1.weight"].clone()
    t.add_(1.0)
    assert torch.equal(st.tensors["online.backbone.conv1.weight"], before)


def _trained_state(kit, rounds=1):
    """A client state after one real round of training (round 1), and the round-2 global model."""
    m = kit.method
    server = kit.server()
    down = m.broadcast(server, kit.sctx(1))
    up, st = m.client_update(down, m.init_client(0, server), kit.clients[0], kit.ctx(1, 0))
    up1, _ = m.client_update(down, m.init_client(1, server), kit.clients[1], kit.ctx(1, 1))
    server = m.server_aggregate(server, {0: up, 1: up1}, kit.sctx(1), None)
    return st, m.broadcast(server, kit.sctx(2))


@pytest.mark.parametrize("factor", [2.0, 1.0, 0.5])
def test_dapu_branches(factor: float) -> None:
    """§7.4: μ_dapu above D → global predictor; at or below (D ≥ μ_dapu, §2.4) → the persisted
    local predictor; online = θ_g always."""
    kit = make_kit("fedu")
    st, down2 = _trained_state(kit)
    d = divergence(down2.tensors, st.tensors, kit.method.divergence_names())
    assert d > 0
    above = factor > 1
    kit.method.cfg = FedUConfig(**{**kit.method.cfg.__dict__, "dapu_threshold": d * factor})
    up, _ = kit.method.client_update(down2, st, kit.clients[0], kit.ctx(2, 0, 0))
    assert equal(up.tensors, down2.tensors, "online.")
    assert equal(up.tensors, down2.tensors if above else st.tensors, "predictor.")
    assert up.metrics["dapu_global"] == float(above) and math.isclose(up.metrics["divergence"], d)


def test_local_drift_mode() -> None:
    """§7.5: stored drift = D(start, end) of the previous training; the next decision uses it, not
    D(θ_g, θ_k)."""
    kit = make_kit("fedu", method_params={"divergence_ref": "local_drift"})
    m = kit.method
    server = kit.server()
    down = m.broadcast(server, kit.sctx(1))
    up, st = m.client_update(down, m.init_client(0, server), kit.clients[0], kit.ctx(1, 0))
    drift = float(st.tensors["drift"])
    assert math.isclose(
        drift, divergence(down.tensors, up.tensors, m.divergence_names()), rel_tol=1e-9
    )
    # a "global" model identical to the local one (D(θ_g, θ_k) = 0) still follows the stored drift
    fake_down = type(down)({k: st.tensors[k].clone() for k in down.tensors})
    m.cfg = FedUConfig(**{**m.cfg.__dict__, "dapu_threshold": drift / 2})
    up2, _ = m.client_update(fake_down, st, kit.clients[0], kit.ctx(2, 0, 0))
    assert up2.metrics["divergence"] == drift and up2.metrics["dapu_global"] == 0.0


def test_target_ema_after_one_step() -> None:
    """§7.6: after exactly one optimizer step ξ = 0.99 ξ_old + 0.01 θ_new (1e-7)."""
    # one batch = one step
    kit = make_kit("fedu", method_params={"batch_size": 10_000, "drop_last": False})
    m = kit.method
    st, down2 = _trained_state(kit)
    up, st2 = m.client_update(down2, st, kit.clients[0], kit.ctx(2, 0, 1))
    assert up.metrics["steps"] == 1
    net = m.nets.structure()
    for name, _ in net.target.named_parameters():
        old, new = st.tensors["target." + name], st2.tensors["online." + name]
        assert torch.allclose(
            st2.tensors["target." + name], 0.99 * old + 0.01 * new, atol=1e-7, rtol=0
        ), name


def test_state_persistence_across_unsampled_round() -> None:
    """§7.7: trains in rounds 1 and 3, not 2; the round-3 start uses the round-1 target and
    predictor bitwise."""
    kit = make_kit("fedu", method_params={"dapu_threshold": 0.0})  # always keep the local predictor
    m = kit.method
    server = kit.server()
    down = m.broadcast(server, kit.sctx(1))
    ups, states = {}, {}
    for k in (0, 1):
        ups[k], states[k] = m.client_update(
            down, m.init_client(k, server), kit.clients[k], kit.ctx(1, k)
        )
    server = m.server_aggregate(server, ups, kit.sctx(1), None)
    saved = {k: v.clone() for k, v in states[0].tensors.items()}
    down = m.broadcast(server, kit.sctx(2))  # round 2: client 0 not sampled
    up, states[1] = m.client_update(down, states[1], kit.clients[1], kit.ctx(2, 1))
    server = m.server_aggregate(server, {1: up}, kit.sctx(2), None)
    down3 = m.broadcast(server, kit.sctx(3))
    up3, st3 = m.client_update(down3, states[0], kit.clients[0], kit.ctx(3, 0, 0))
    assert equal(st3.tensors, saved, "target.") and equal(up3.tensors, saved, "predictor.")
    assert equal(up3.tensors, down3.tensors, "online.")


def test_aggregation_weights() -> None:
    """§7.8: n = (1, 3) → 0.25 / 0.75 mixtures for parameters and running statistics."""
    from benchmark.api import Payload

    kit = make_kit("fedu")
    server = kit.server()
    a = {k: torch.zeros_like(v) for k, v in server.model.items()}
    b = {k: torch.ones_like(v) for k, v in server.model.items()}
    out = kit.method.server_aggregate(
        server, {0: Payload(a, 1), 1: Payload(b, 3)}, kit.sctx(1), None
    )
    for k, v in out.model.items():
        assert torch.allclose(v, torch.full_like(v, 0.75)), k
    assert any("running_var" in k for k in out.model)


def test_lr_schedule_and_fresh_momentum(monkeypatch) -> None:
    """§7.9: lr_r = 0.016 (1 + cos(π(r−1)/R)); momentum buffers empty at the start of each round:
    one new optimizer per round, whose first step finds no state (a reused optimizer would carry its
    momentum into the next round)."""
    seen: list[float] = []  # the lr of each optimizer built
    # round -> optimizer state entries at that round's first step
    first_step_state: dict[int, int] = {}
    # round -> the optimizers that stepped in it, held here so that no two can share an id (a freed
    # optimizer's address is reused by the next one, which made ids of short-lived optimizers
    # collide)
    steppers: dict[int, list] = {}
    rnd = {"r": 0}
    real = torch.optim.SGD

    class Spy(real):
        def __init__(self, params, **kw):
            super().__init__(params, **kw)
            seen.append(kw["lr"])

        def step(self, *a, **k):
            first_step_state.setdefault(rnd["r"], len(self.state))
            steppers.setdefault(rnd["r"], []).append(self)
            return super().step(*a, **k)

    monkeypatch.setattr(torch.optim, "SGD", Spy)
    # a quarter of the train split (tests/methods/small_data.py): ~180 images a client, still
    # several steps a round, which is all the lr and the momentum's reset need
    kit = make_kit("fedu", rounds=5, clients=2, dataset=SMALL_DIGITS)
    m = kit.method
    server = kit.server()
    st = m.init_client(0, server)
    keep = []
    for r in (1, 2, 3):
        rnd["r"] = r
        up, st = m.client_update(
            m.broadcast(server, kit.sctx(r)), st, kit.clients[0], kit.ctx(r, 0)
        )
        assert up.metrics["steps"] > 0
        keep.append(up)
    assert len(seen) == 3  # one optimizer per round (no silent zip over fewer)
    for r, lr in zip((1, 2, 3), seen, strict=True):
        assert math.isclose(lr, 0.016 * (1 + math.cos(math.pi * (r - 1) / 5)), rel_tol=1e-12)
    assert first_step_state == {1: 0, 2: 0, 3: 0}
    ids = {r: {id(o) for o in opts} for r, opts in steppers.items()}
    assert len(set().union(*ids.values())) == 3 and all(len(v) == 1 for v in ids.values())


@pytest.mark.slow
def test_comm_bytes_match_formula(tmp_path: Path) -> None:
    """§8: C↓ = C↑ = 4 (P_f + S_f + P_g + S_g + P_h + S_h) per participant, from the parameter
    counts."""
    # a quarter of the train split (tests/methods/small_data.py): bytes count parameters, not data
    cell = smoke_cell(
        "fedu", rounds=2, clients=6, participation=0.34, tasks=[], dataset=SMALL_DIGITS
    )
    rec = run_cell(cell, tmp_path, device="cpu")
    m = make_kit("fedu").method
    net = m.build()

    def count(mod):
        params = sum(p.numel() for p in mod.parameters())
        stats = sum(
            b.numel() for n, b in mod.named_buffers() if n.endswith(("running_mean", "running_var"))
        )
        return params + stats

    per_client = 4 * (
        count(net.online.backbone) + count(net.online.projector) + count(net.predictor)
    )
    assert rec.comm.per_round_down == (2 * per_client, 2 * per_client)
    assert rec.comm.per_round_up == (2 * per_client, 2 * per_client)
    # the record's totals over several rounds (the FedAvg-SimCLR formula test reads a 1-round run)
    assert rec.comm.bytes_up == rec.comm.bytes_down == 2 * 2 * per_client


def test_first_round_alias_option() -> None:
    """§6.3: with ``alias`` the persisted target after the first round is the trained online
    encoder."""
    kit = make_kit("fedu", method_params={"first_round_target": "alias"})
    m = kit.method
    server = kit.server()
    up, st = m.client_update(
        m.broadcast(server, kit.sctx(1)), m.init_client(0, server), kit.clients[0], kit.ctx(1, 0)
    )
    for k in up.tensors:
        if k.startswith("online."):
            assert torch.equal(st.tensors["target." + k[len("online.") :]], up.tensors[k])
