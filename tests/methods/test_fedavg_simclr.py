"""docs/methods/fedavg_simclr.md §9: the faithfulness properties of FedAvg-SimCLR and its reference
points."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from benchmark.api import (
    aggregation_weights,
    bn_tensor_names,
    mlp_head,
    ntxent_2b,
    tensors_of,
    weighted_average,
)
from benchmark.building_blocks.backbones import ResNet18Cifar
from benchmark.engine.runner import run_cell
from benchmark.records.files import read_record
from methods._shared.losses import crossview_1dir
from methods._shared.nets import BackboneHead
from methods._shared.optim import round_lr
from methods._shared.simclr import SIMCLR_NAMES
from methods.fedavg_simclr import FedAvgSimCLR, FedAvgSimCLRConfig
from tests.cell_cache import cached_run
from tests.helpers import digits_inputs, smoke_cell
from tests.methods.small_data import SMALL_DIGITS


def ntxent_loop(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> torch.Tensor:
    u = F.normalize(torch.cat([z1, z2]).double(), dim=1)
    n = u.shape[0]
    b = n // 2
    total = torch.zeros((), dtype=torch.float64)
    for a in range(n):
        pos = (a + b) % n
        num = torch.exp(u[a] @ u[pos] / tau)
        den = sum(torch.exp(u[a] @ u[j] / tau) for j in range(n) if j != a)
        total += -torch.log(num / den)
    return total / n


def test_ntxent_matches_double_loop() -> None:  # §9.1
    g = torch.Generator().manual_seed(0)
    z1, z2 = (
        torch.randn(6, 5, generator=g, dtype=torch.float64),
        torch.randn(6, 5, generator=g, dtype=torch.float64),
    )
    assert float(ntxent_2b(z1, z2, 0.5)) == pytest.approx(float(ntxent_loop(z1, z2, 0.5)), rel=1e-5)


def test_ntxent_equals_pytorch_metric_learning() -> None:
    from methods._shared.losses import ntxent_2b_pml

    g = torch.Generator().manual_seed(5)
    z1, z2 = torch.randn(16, 8, generator=g), torch.randn(16, 8, generator=g)
    assert float(ntxent_2b(z1, z2, 0.1)) == pytest.approx(
        float(ntxent_2b_pml(z1, z2, 0.1)), rel=1e-5
    )


def test_ntxent_hand_value() -> None:  # §9.1: B=2, u1=u2, orthogonal images
    z = torch.eye(2)
    expected = -math.log(math.e**2 / (math.e**2 + 2))
    assert float(ntxent_2b(z, z.clone(), 0.5)) == pytest.approx(expected, rel=1e-6)


def test_crossview_is_ce_with_diagonal_targets_and_grads_flow() -> None:  # §9.2
    g = torch.Generator().manual_seed(1)
    z1 = torch.randn(4, 3, generator=g, requires_grad=True)
    z2 = torch.randn(4, 3, generator=g, requires_grad=True)
    loss = crossview_1dir(z1, z2, 0.4)
    ref = F.cross_entropy(
        F.normalize(z1, dim=1) @ F.normalize(z2, dim=1).t() / 0.4, torch.arange(4)
    )
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-6)
    loss.backward()
    assert (
        z1.grad is not None
        and z2.grad is not None
        and z1.grad.abs().sum() > 0
        and z2.grad.abs().sum() > 0
    )


def test_ntxent_decreases_under_gradient_steps() -> None:
    g = torch.Generator().manual_seed(2)
    z1 = torch.randn(8, 4, generator=g, requires_grad=True)
    z2 = (z1.detach() + torch.randn(8, 4, generator=g)).requires_grad_(True)
    opt = torch.optim.SGD([z1, z2], lr=0.5)
    losses = []
    for _ in range(3):
        loss = ntxent_2b(z1, z2, 0.5)
        losses.append(float(loss))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[0] > losses[1] > losses[2]


def test_aggregation_properties() -> None:  # §9.3
    g = torch.Generator().manual_seed(3)
    state = {"w": torch.randn(3, 3, generator=g), "b": torch.randn(3, generator=g)}
    out = weighted_average([state, state, state], [1, 5, 2])
    assert all(torch.equal(out[k], state[k]) for k in state)
    assert aggregation_weights([7, 7, 7], "uniform") == pytest.approx(
        aggregation_weights([7, 7, 7], "num_examples")
    )
    assert sum(aggregation_weights([1, 2, 3], "num_examples")) == pytest.approx(1.0)
    s2 = {"w": torch.randn(3, 3, generator=g), "b": torch.randn(3, generator=g)}
    a = weighted_average([state, s2], [1, 3])
    b = weighted_average([s2, state], [3, 1])  # permuting clients with their weights
    assert all(torch.allclose(a[k], b[k]) for k in a)


def test_payloads_have_no_num_batches_tracked() -> None:
    net = BackboneHead(ResNet18Cifar(width=4).build(), mlp_head(32, 32, 32), SIMCLR_NAMES)
    assert not any(k.endswith("num_batches_tracked") for k in tensors_of(net))


def test_schedule_milestones() -> None:  # §9.5
    lrs = [round_lr(1e-3, r, 100, (0.3, 0.6, 0.9), 0.3) for r in range(1, 101)]
    changes = [i for i in range(1, 100) if lrs[i] != lrs[i - 1]]
    assert len(set(lrs)) == 4 and changes == [30, 60, 90]  # 0-based rounds 30, 60, 90
    lrs10 = [round_lr(1e-3, r, 10, (0.3, 0.6, 0.9), 0.3) for r in range(1, 11)]
    assert [i for i in range(1, 10) if lrs10[i] != lrs10[i - 1]] == [3, 6, 9]
    assert lrs[99] == pytest.approx(1e-3 * 0.3**3)


def test_communication_formula_cifar_stem() -> None:  # §8 worked example, §9.9
    net = BackboneHead(ResNet18Cifar().build(), mlp_head(512, 512, 512), SIMCLR_NAMES)
    payload = tensors_of(net)
    nbytes = sum(t.numel() * t.element_size() for t in payload.values())
    assert nbytes == 46_823_168
    params = sum(p.numel() for p in net.parameters())
    assert params == 11_695_168
    bn = bn_tensor_names(net)
    running = sum(payload[k].numel() for k in bn if "running" in k)
    assert running == 10_624
    local_down = sum(t.numel() * t.element_size() for k, t in payload.items() if k not in bn)
    assert local_down == (11_695_168 - 10_624) * 4 == 46_738_176


def test_bytes_in_record_match_payload_formula(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Each round every selected client uploads the whole model and receives it: the record's
    bytes are clients x rounds x the model's payload, computed from the cell's own inputs. The run
    read is the session's FedAvg-SimCLR smoke cell (tests/cell_cache.py), not one of its own; the
    engine's summation over several rounds is checked by tests/methods/test_fedu.py."""
    cell = smoke_cell("fedavg_simclr")
    cached_run(cell, tmp_path, tmp_path_factory)
    record = read_record(tmp_path / "fedavg_simclr" / cell.cell_id / "record.json")
    m = FedAvgSimCLR(FedAvgSimCLRConfig(), cell.backbone, digits_inputs())
    per_model = sum(t.numel() * t.element_size() for t in tensors_of(m.build()).values())
    per_round = cell.fl.num_clients * per_model  # participation 1.0: every client, every round
    assert record.comm.per_round_up == record.comm.per_round_down == (per_round,) * cell.fl.rounds
    assert record.comm.bytes_up == record.comm.bytes_down == cell.fl.rounds * per_round


def test_bn_local_keeps_client_bn(tmp_path: Path) -> None:  # §9.4
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.rounds import SimSettings, client_context, server_context
    from benchmark.engine.stages import build_method, build_partition, client_datasets, input_spec

    cell = smoke_cell("fedavg_simclr", method_params={"bn": "local"})
    ds = load_dataset_splits("digits", dict(cell.dataset.params))
    method = build_method(cell, input_spec(ds))
    clients = client_datasets(method, ds, build_partition(cell, ds.train.labels))
    s = SimSettings(seed=0, num_rounds=2, local_epochs=1, per_round=2, device=torch.device("cpu"))
    server = method.init_server(server_context(s, 0, None))
    bn = method.bn_names()
    down = method.broadcast(server, server_context(s, 1, None))
    assert bn and not (set(down.tensors) & bn)
    ups, states = {}, {}
    for k in (0, 1):
        ups[k], states[k] = method.client_update(
            down, method.init_client(k, server), clients[k], client_context(s, 1, k, None)
        )
        assert all(torch.equal(states[k].tensors[n], ups[k].tensors[n]) for n in bn)
    server = method.server_aggregate(server, ups, server_context(s, 1, None), None)
    for n in bn:
        assert torch.allclose(
            server.model[n], (ups[0].tensors[n] + ups[1].tensors[n]) / 2, atol=1e-6
        )
    # next round: the client starts from its own BN, not the server's mean
    start = method.start_tensors(method.broadcast(server, server_context(s, 2, None)), states[0])
    assert all(torch.equal(start[n], states[0].tensors[n]) for n in bn)


def test_identical_clients_aggregate_to_each_model() -> None:  # §9.8
    from benchmark.contracts.types import ClientData
    from benchmark.contracts.unlabeled_view import UnlabeledView
    from benchmark.engine.rounds import SimSettings, client_context, server_context

    cell = smoke_cell("fedavg_simclr")
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.stages import build_method, input_spec

    ds = load_dataset_splits("digits", dict(cell.dataset.params))
    method = build_method(cell, input_spec(ds))
    view = UnlabeledView(ds.train.images[:32], ds.mean, ds.std)
    s = SimSettings(seed=0, num_rounds=1, local_epochs=1, per_round=2, device=torch.device("cpu"))
    server = method.init_server(server_context(s, 0, None))
    down = method.broadcast(server, server_context(s, 1, None))
    same_ctx = client_context(s, 1, 0, None)
    ups = {}
    for k in (0, 1):
        ctx = client_context(s, 1, 0, None)  # the same RNG stream for both
        ups[k], _ = method.client_update(
            down, method.init_client(k, server), ClientData(k, 32, view), ctx
        )
    del same_ctx
    agg = method.server_aggregate(server, ups, server_context(s, 1, None), None)
    assert all(torch.equal(agg.model[n], ups[0].tensors[n]) for n in ups[0].tensors)


def test_determinism_same_cell_twice(tmp_path: Path) -> None:  # §9.10
    # a quarter of the train split (tests/methods/small_data.py): the same cell twice is the
    # same whatever it trains on
    cell = smoke_cell("fedavg_simclr", tasks=["knn"], dataset=SMALL_DIGITS)
    a = run_cell(cell, tmp_path / "a", device="cpu")
    b = run_cell(cell, tmp_path / "b", device="cpu")
    assert a.final_state_digest == b.final_state_digest
    assert [(s.card.card_id, s.values) for s in a.scores] == [
        (s.card.card_id, s.values) for s in b.scores
    ]


def test_local_ssl_reports_mean_and_min_never_max(tmp_path: Path) -> None:  # §9.13
    # a quarter of the train split (tests/methods/small_data.py): which values are reported is
    # not how well the clients trained
    cell = smoke_cell("local_ssl", tasks=["knn"], dataset=SMALL_DIGITS)
    record = run_cell(cell, tmp_path, device="cpu")
    knn = record.score("knn")
    assert set(knn.values) == {"top1", "top1_min"}
    assert knn.values["top1_min"] <= knn.values["top1"]
    assert len(knn.extra["per_member"]) == 2
    assert record.comm.bytes_up == 0 and record.comm.bytes_down == 0


def test_no_pretrain_depends_only_on_init_seed(tmp_path: Path) -> None:  # §9.13
    a = run_cell(smoke_cell("no_pretrain", tasks=[], partition="iid"), tmp_path / "a", device="cpu")
    b = run_cell(
        smoke_cell("no_pretrain", tasks=[], partition={"name": "dirichlet", "alpha": 1.0}),
        tmp_path / "b",
        device="cpu",
    )
    c = run_cell(smoke_cell("no_pretrain", tasks=[], seed=1), tmp_path / "c", device="cpu")
    assert a.final_state_digest == b.final_state_digest != c.final_state_digest


def test_central_ssl_pools_all_clients(tmp_path: Path) -> None:
    # a quarter of the train split (tests/methods/small_data.py): one pooled client is one
    # epoch a round whatever the pool's size
    cell = smoke_cell("central_ssl", clients=3, tasks=[], dataset=SMALL_DIGITS)
    record = run_cell(cell, tmp_path, device="cpu")
    # one pooled client, one epoch per round
    assert record.status == "ok" and record.compute.client_epochs == 1


def test_non_finite_loss_is_a_diverged_record(tmp_path: Path) -> None:
    cell = smoke_cell("fedavg_simclr", method_params={"lr": 1e30}, rounds=2)
    record = run_cell(cell, tmp_path, device="cpu")
    assert record.status == "diverged" and "non-finite" in record.reason and record.scores == ()


@pytest.mark.parametrize(
    "shape, layers, out_dim",
    [
        (
            "decssl",
            [("Linear", True), ("BatchNorm1d", True), ("ReLU", None), ("Linear", True)],
            512,
        ),
        (
            "orchestra",
            [
                ("Linear", False),
                ("BatchNorm1d", True),
                ("ReLU", None),
                ("Linear", True),
                ("BatchNorm1d", False),
            ],
            512,
        ),
        ("flesd", [("Linear", True), ("ReLU", None), ("Linear", True)], 128),
    ],
)
def test_projector_presets_have_the_papers_shapes(shape: str, layers: list, out_dim: int) -> None:
    """§5: Dec-SSL Linear-BN-ReLU-Linear; Orchestra's f-SimCLR Linear(no
    bias)-BN-ReLU-Linear-BN(affine=False); FLESD's FedAvg Linear-ReLU-Linear(d, 128)."""
    from methods._shared.simclr import simclr_projector

    head = simclr_projector(FedAvgSimCLRConfig(projector=shape), 512)
    got = []
    for m in head:
        kind = type(m).__name__
        flag = (
            (m.bias is not None)
            if kind == "Linear"
            else m.affine
            if kind == "BatchNorm1d"
            else None
        )
        got.append((kind, flag))
    assert got == layers
    assert head(torch.randn(4, 512)).shape == (4, out_dim)


def test_cell_normalisation_reaches_training_and_the_encoder_metadata(
    tmp_path: Path, monkeypatch
) -> None:
    """Dataset param ``normalize: half`` (Orchestra's and FLESD's mean = std = 0.5): the clients'
    views are normalised with 0.5 and the exported encoder carries 0.5, so tasks evaluate with the
    encoder's own statistics."""
    import methods.fedavg_simclr as method_file  # its client step draws the views (issue 58)

    seen = []
    real = method_file.two_views

    def spy(batch, cfg, gen, *, mean, std):
        seen.append((tuple(mean), tuple(std)))
        return real(batch, cfg, gen, mean=mean, std=std)

    monkeypatch.setattr(method_file, "two_views", spy)
    # a quarter of the train split (tests/methods/small_data.py): the statistics a view and a
    # feature are normalised with do not depend on the split's size
    half = {**SMALL_DIGITS, "normalize": "half"}
    rec = run_cell(smoke_cell(dataset=half, tasks=["knn"]), tmp_path)
    assert rec.status == "ok" and set(seen) == {((0.5,) * 3, (0.5,) * 3)}
    assert rec.cell["dataset"]["params"]["normalize"] == "half"

    # the frozen features are computed in benchmark.api's feature extraction (issue 47 moved it
    # there from tasks/): spy on the function every frozen-feature task reads them through
    import benchmark.building_blocks.features as feats

    stats = []
    real_cf = feats.cached_features

    def spy_cf(cache, key, module, split, mean, std, device):
        stats.append((tuple(mean), tuple(std)))
        return real_cf(cache, key, module, split, mean, std, device)

    monkeypatch.setattr(feats, "cached_features", spy_cf)
    run_cell(smoke_cell(dataset=half, tasks=["knn"], seed=3), tmp_path)
    assert stats and set(stats) == {((0.5,) * 3, (0.5,) * 3)}


def test_bn_filter_decssl_names_keeps_what_the_dec_ssl_imagenet_code_keeps() -> None:
    """docs/methods/fedavg_simclr.md §7.1: the code reloads averaged weights except keys containing
    "bn" or "running": the stem's (Dec-SSL f.1) and the downsample's (downsample.1) BN affine
    parameters are averaged, their statistics kept."""
    from benchmark.api import bn_tensor_names, build_backbone
    from methods._shared.nets import BackboneHead
    from methods._shared.simclr import SIMCLR_NAMES, SimCLRConfig, local_bn_names, simclr_projector

    enc, dim = build_backbone("resnet18", {})
    cfg = SimCLRConfig(bn="local", bn_filter="decssl_names")
    net = BackboneHead(enc, simclr_projector(cfg, dim), SIMCLR_NAMES)
    by_type, by_name = bn_tensor_names(net), local_bn_names(net, cfg)
    assert by_name < by_type
    averaged = by_type - by_name
    assert {
        "encoder.bn1.weight",
        "encoder.bn1.bias",
        "encoder.layer2.0.downsample.1.weight",
        "projector.1.weight",
    } <= averaged
    assert {
        "encoder.bn1.running_mean",
        "encoder.layer2.0.downsample.1.running_var",
        "encoder.layer1.0.bn2.weight",
        "projector.1.running_mean",
    } <= by_name
    assert local_bn_names(net, SimCLRConfig(bn="local")) == by_type  # the default: by module type


def test_step_epochs_schedule_is_a_multistep_lr_over_epochs() -> None:
    """central_ssl's native schedule (centralized_ssl_main.py): x0.3 at epochs 30, 60, 90; constant
    within a round."""
    from types import SimpleNamespace

    from methods._shared.optim import scheduled_lr

    cfg = SimpleNamespace(
        lr_schedule="step_epochs", lr=1e-3, lr_milestones=(30, 60, 90), lr_gamma=0.3
    )
    lrs = [scheduled_lr(cfg, r, 100, local_epochs=5) for r in range(1, 101)]
    assert lrs[0] == lrs[5] == 1e-3  # epochs 0-29: rounds 1-6
    # epoch 30 starts round 7
    assert lrs[6] == pytest.approx(3e-4) and lrs[11] == pytest.approx(3e-4)
    assert (
        lrs[12] == pytest.approx(9e-5)
        and lrs[18] == pytest.approx(2.7e-5)
        and lrs[-1] == pytest.approx(2.7e-5)
    )


def test_client_sampling_size_uniqueness_and_the_engine_uses_it(tmp_path) -> None:
    """docs/methods/fedavg_simclr.md §9 item 6: |M_t| = max(floor(p K), 1) clients without
    replacement, a pure function of (seed, round) — so every launcher, resumed or not, trains the
    same clients — and the round loop trains exactly them."""
    from benchmark.contracts.specs import FLConfig
    from benchmark.engine.rounds import sample_clients
    from benchmark.engine.stages import prepare, pretrain
    from benchmark.runroot.rundir import PretrainDir

    for k, p in ((10, 0.05), (10, 0.1), (10, 0.55), (100, 0.1), (100, 1.0)):
        m = FLConfig(num_clients=k, participation=p).clients_per_round
        assert m == max(int(p * k), 1)
        draws = [sample_clients(3, r, k, m) for r in range(1, 6)]
        assert all(
            len(d) == m == len(set(d)) and d == sorted(d) and set(d) <= set(range(k)) for d in draws
        )
        assert draws == [sample_clients(3, r, k, m) for r in range(1, 6)]  # the same in any process
        if m < k:
            assert len({tuple(d) for d in draws}) > 1  # rounds draw afresh
    # a quarter of the train split (tests/methods/small_data.py): which clients a round trains
    # does not depend on their data
    prep = prepare(
        smoke_cell(
            "fedavg_simclr",
            rounds=3,
            clients=4,
            participation=0.5,
            tasks=[],
            dataset=SMALL_DIGITS,
        )
    )
    trained: dict[int, list[int]] = {}
    update = prep.method.client_update

    def spy(down, state, data, ctx):
        trained.setdefault(ctx.round, []).append(ctx.client_id)
        return update(down, state, data, ctx)

    prep.method.client_update = spy
    assert pretrain(prep, PretrainDir(tmp_path)).status == "ok"
    assert trained == {r: sample_clients(prep.cell.seed, r, 4, 2) for r in (1, 2, 3)}


@pytest.mark.parametrize("mode", ["reset", "keep"])
# §9.5, second sentence
def test_optimizer_state_at_each_rounds_first_step(monkeypatch, mode: str) -> None:
    """`optimizer_state: reset` (the default, Dec-SSL's code): the optimizer of round t finds no
    state at its first step (one new Adam per round); `keep`: round 2's optimizer starts from round
    1's moments (Adam's step count goes on). A reset that reuses or restores an optimizer, or a keep
    that forgets, fails here."""
    from tests.methods.byol_testkit import make_kit

    first: dict[int, dict] = {}  # round -> (state entries, Adam step) at that round's first step
    built: list = []  # the optimizers themselves: a freed optimizer's id can be the next one's
    rnd = {"r": 0}
    real = torch.optim.Adam

    class Spy(real):
        def __init__(self, params, *a, **kw):
            super().__init__(params, *a, **kw)
            built.append(self)

        def step(self, *a, **k):
            if rnd["r"] not in first:
                steps = [float(s["step"]) for s in self.state.values() if "step" in s]
                first[rnd["r"]] = {
                    "entries": len(self.state),
                    "step": max(steps, default=0.0),
                    "opt": self,
                }
            return super().step(*a, **k)

    monkeypatch.setattr(torch.optim, "Adam", Spy)
    kit = make_kit("fedavg_simclr", rounds=3, clients=2, method_params={"optimizer_state": mode})
    m = kit.method
    server = kit.server()
    st = m.init_client(0, server)
    steps = []
    for r in (1, 2):
        rnd["r"] = r
        up, st = m.client_update(
            m.broadcast(server, kit.sctx(r)), st, kit.clients[0], kit.ctx(r, 0)
        )
        steps.append(up.metrics["steps"])
        assert up.metrics["steps"] > 1
    # a new optimizer object each round
    assert len(built) == 2 and first[1]["opt"] is not first[2]["opt"]
    assert first[1]["entries"] == 0
    if mode == "reset":
        assert first[2]["entries"] == 0 and first[2]["step"] == 0.0
    else:
        # round 1's moments, restored
        assert first[2]["entries"] > 0 and first[2]["step"] == steps[0]


def test_one_client_one_round_equals_central_ssl_with_a_constant_lr(tmp_path: Path) -> None:  # §9.7
    """K = 1, p = 1, R = 1, E = E_total is central SSL at a constant lr, bit-exactly on CPU: both
    run one optimizer over the same data stream (same seeds); a federated path that reorders,
    re-seeds or re-initialises differs."""
    # a quarter of the train split (tests/methods/small_data.py): two runs over the same stream
    # are equal bit for bit (or not) whatever its length; two epochs still cross an epoch boundary
    params = {"lr_schedule": "constant"}
    fed = run_cell(
        smoke_cell(
            "fedavg_simclr",
            clients=1,
            rounds=1,
            tasks=[],
            method_params=params,
            fl={"num_clients": 1, "participation": 1.0, "rounds": 1, "local_epochs": 2},
            dataset=SMALL_DIGITS,
        ),
        tmp_path / "fed",
        device="cpu",
    )
    central = run_cell(
        smoke_cell(
            "central_ssl",
            clients=1,
            rounds=1,
            tasks=[],
            method_params=params,
            fl={"num_clients": 1, "participation": 1.0, "rounds": 1, "local_epochs": 2},
            dataset=SMALL_DIGITS,
        ),
        tmp_path / "central",
        device="cpu",
    )
    assert fed.status == central.status == "ok"
    assert fed.compute.client_epochs == central.compute.client_epochs == 2
    assert fed.final_state_digest == central.final_state_digest


def test_num_batches_weighting_uploads_the_batch_count_as_the_weight() -> None:
    """docs/methods/fedavg_simclr.md §7.2, ``weighting: num_batches`` (Dec-SSL's code): a client's
    upload is weighted by the batches it trained on, not by its examples (the server then averages
    with those weights as it would with example counts)."""
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.rounds import SimSettings, client_context, server_context
    from benchmark.engine.stages import build_method, build_partition, client_datasets, input_spec

    cell = smoke_cell("fedavg_simclr", method_params={"weighting": "num_batches", "batch_size": 64})
    ds = load_dataset_splits("digits", dict(cell.dataset.params))
    method = build_method(cell, input_spec(ds))
    data = client_datasets(method, ds, build_partition(cell, ds.train.labels))[0]
    s = SimSettings(
        seed=0,
        num_rounds=1,
        local_epochs=1,
        per_round=2,
        device=torch.device("cpu"),
        num_classes=int(ds.train.labels.max()) + 1,
    )
    server = method.init_server(server_context(s, 0, None))
    up, _ = method.client_update(
        method.broadcast(server, server_context(s, 1, None)),
        method.init_client(0, server),
        data,
        client_context(s, 1, 0, None),
    )
    batches = up.metrics["steps"] + up.metrics["skipped_steps"]  # full batches only (SimCLR)
    assert data.num_examples > 64 and up.num_examples == batches == data.num_examples // 64
