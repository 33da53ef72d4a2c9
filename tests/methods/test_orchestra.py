"""Orchestra (docs/methods/orchestra.md §7 items 6-13, 15): losses, gradient, EMA and memory on the
method's own steps, rotation, initialisation round, payloads, bytes, aggregation."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import (
    ClientData,
    ClientState,
    Payload,
    RoundContext,
    Stream,
    UnlabeledView,
    np_rng,
    torch_gen,
)
from benchmark.contracts.specs import ComponentSpec
from benchmark.data.augment import AugmentConfig
from benchmark.engine.rounds import payload_nbytes
from benchmark.engine.runner import run_cell
from methods._shared.ema import momentum_update_
from methods.orchestra import Orchestra, OrchestraConfig, rotate_batch, rotation_labels
from tests.helpers import digits_inputs, run_straight_and_resumed, smoke_cell
from tests.methods.small_data import SMALL_DIGITS

MICRO = ComponentSpec("resnet_micro", "1", {"width": 4})


def ctx(round_: int, client: int | None = None, seed: int = 0, epochs: int = 1) -> RoundContext:
    stream = Stream.SERVER if client is None else Stream.CLIENT
    path = (round_,) if client is None else (round_, client)
    return RoundContext(
        round=round_,
        num_rounds=3,
        client_id=client,
        device=torch.device("cpu"),
        seed=seed,
        rng=np_rng(seed, stream, *path),
        generator=torch_gen(seed, stream, *path),
        local_epochs=epochs,
    )


def client_data(n: int = 48, seed: int = 0, k: int = 0) -> ClientData:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, 16, 16), generator=g, dtype=torch.uint8)
    return ClientData(
        client_id=k, num_examples=n, train=UnlabeledView(images, (0.5,) * 3, (0.25,) * 3)
    )


def method(**kw) -> Orchestra:
    cfg = OrchestraConfig(
        **{"batch_size": 16, "memory_size": 32, "num_global_clusters": 6, "global_steps": 5, **kw}
    )
    return Orchestra(cfg, MICRO, digits_inputs())


def test_ema_parameters_only() -> None:
    torch.manual_seed(0)
    online = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    target = copy.deepcopy(online)
    with torch.no_grad():
        for p in online.parameters():
            p.add_(torch.randn_like(p))
        online[1].running_mean.fill_(3.0)
    old = [p.clone() for p in target.parameters()]
    old_buf = target[1].running_mean.clone()
    momentum_update_(target, online, 0.996)
    for t, o, p_old in zip(target.parameters(), online.parameters(), old):
        assert torch.allclose(t, 0.996 * p_old + 0.004 * o, atol=1e-7)
    # buffers change only through the target's forward
    assert torch.equal(target[1].running_mean, old_buf)


def test_rotation_labels_and_views() -> None:
    r = rotation_labels(10_000, torch.Generator().manual_seed(0))
    freq = torch.bincount(r, minlength=4).float() / 10_000
    assert ((freq - 0.25).abs() <= 0.02).all()
    x = torch.randn(12, 3, 8, 8)
    r = rotation_labels(12, torch.Generator().manual_seed(1))
    x3 = rotate_batch(x, r)
    for i in range(12):
        y = x[i]
        for _ in range(int(r[i])):
            y = torch.rot90(y, 1, dims=(1, 2))
        assert torch.equal(x3[i], y)


def test_initialisation_round() -> None:
    m = method()
    server = m.init_server(ctx(0))
    down = m.broadcast(server, ctx(1))
    assert set(down.tensors) == {k for k in server.model if k.startswith("target.")}
    before = {k: v.clone() for k, v in down.tensors.items()}
    sgd_steps = []
    orig = torch.optim.SGD.step
    torch.optim.SGD.step = lambda self, *a, **k: sgd_steps.append(1)  # type: ignore[method-assign]
    try:
        up, _ = m.client_update(down, ClientState(), client_data(), ctx(1, 0))
    finally:
        torch.optim.SGD.step = orig  # type: ignore[method-assign]
    assert not sgd_steps
    work = m.nets.get(torch.device("cpu")).target.state_dict()
    for k, v in before.items():  # every model tensor, BN running buffers included, bit-identical
        assert torch.equal(work[k[len("target.") :]], v)
    d = m.proj_dim()
    assert set(up.tensors) == {"local_centroids"} and up.tensors["local_centroids"].shape == (8, d)
    new = m.server_aggregate(server, {0: up}, ctx(1), None)
    c0, c1 = server.extra["global_centroids"], new.extra["global_centroids"]
    assert not torch.equal(c0, c1)
    assert torch.allclose(c1.norm(dim=1), torch.ones(len(c1)), atol=1e-5)
    # no encoder aggregation
    assert all(torch.equal(new.model[k], server.model[k]) for k in server.model)


def test_initialisation_round_follows_the_small_client_policy() -> None:
    """docs/protocols/small-clients.md §1: the initialisation round fills its memory under the same
    policy as the local loop, so a client of 2 <= n < B images (here 12 < B = 16, at least N_l)
    sends local centroids from one batch of all its images instead of none (issue 55)."""
    m = method()
    server = m.init_server(ctx(0))
    up, _ = m.client_update(
        m.broadcast(server, ctx(1)), ClientState(), client_data(n=12), ctx(1, 0)
    )
    assert up.metrics["init"] == 1.0 and up.num_examples == 12
    assert up.tensors["local_centroids"].shape == (8, m.proj_dim())


def test_views_are_the_documented_augmentations() -> None:
    """docs/methods/orchestra.md §2.10, word for word: view A (target, and the base of the rotation
    view) and view A' (online: A with blur p 0.1, then solarize p 0.2). The augmentation configs are
    exempt from the documented-defaults table test because they are held here (issue 55: A's blur
    p 0.5 -> 0 passed every test)."""
    doc = (Path(__file__).resolve().parents[2] / "docs/methods/orchestra.md").read_text("utf-8")
    section = doc.split("### 2.10 Augmentations", 1)[1].split("\n## ", 1)[0]
    section = " ".join(section.split())
    view_a = {
        "RandomResizedCrop(32, scale = (0.5, 1.0), bicubic)": {
            "crop_scale": (0.5, 1.0),
            "interpolation": "bicubic",
        },
        "HorizontalFlip(p = 0.5)": {"flip_p": 0.5},
        "ColorJitter(brightness 0.4, contrast 0.4, saturation 0.2, hue 0.1) with p = 0.8": {
            "jitter": (0.4, 0.4, 0.2, 0.1),
            "jitter_p": 0.8,
        },
        "RandomGrayscale(p = 0.2)": {"gray_p": 0.2},
        "GaussianBlur(kernel 3, sigma ~ U[0.1, 2.0]) with p = 0.5": {
            "blur_kernel": 3,
            "blur_sigma": (0.1, 2.0),
            "blur_p": 0.5,
        },
    }
    a: dict = {}
    for words, fields in view_a.items():
        assert words in section, words
        a.update(fields)
    assert "the same as A, except the blur has p = 0.1" in section
    assert "Solarize with p = 0.2" in section
    cfg = OrchestraConfig()
    assert cfg.augment_target == AugmentConfig(**a)  # crop_ratio: RandomResizedCrop's default
    assert cfg.augment_online == AugmentConfig(**{**a, "blur_p": 0.1})
    assert cfg.solarize_p == 0.2


def test_server_clustering_runs_with_the_server_settings(monkeypatch) -> None:
    """§2.9: the server clusters the uploaded centroids with its own settings (500 SGD steps, SK
    lambda, tolerance and 100 server iterations, not the clients' 10), warm-started from the current
    global centroids (issue 55: the server's Sinkhorn at 10 iterations passed)."""
    from methods import orchestra

    m = method(
        global_steps=3,
        global_lr=0.02,
        global_momentum=0.8,
        global_weight_decay=2e-4,
        temperature=0.2,
        sk_lambda=20.0,
        sk_iters_server=37,
        sk_iters_local=4,
        sk_tol=0.03,
    )
    calls = []
    real = orchestra.global_clustering

    def spy(y, c, **kw):
        calls.append((y.clone(), c.clone(), kw))
        return real(y, c, **kw)

    monkeypatch.setattr(orchestra, "global_clustering", spy)
    server = m.init_server(ctx(0))
    cents = {k: F.normalize(torch.randn(8, m.proj_dim()), dim=1) for k in (0, 1)}
    ups = {k: Payload({"local_centroids": cents[k]}, num_examples=10) for k in (0, 1)}
    m.server_aggregate(server, ups, ctx(1), None)
    ((y, c, kw),) = calls
    assert torch.equal(y, torch.cat([cents[0], cents[1]]))
    assert torch.equal(c, server.extra["global_centroids"])
    assert kw == {
        "steps": 3,
        "lr": 0.02,
        "momentum": 0.8,
        "weight_decay": 2e-4,
        "temperature": 0.2,
        "lam": 20.0,
        "sk_iters": 37,
        "tol": 0.03,
    }


def _enc_keys(server_model, prefix):
    return {k for k in server_model if k.startswith(prefix)}


def test_training_payloads_and_aggregation() -> None:
    m = method()
    server = m.init_server(ctx(0))
    down = m.broadcast(server, ctx(2))
    enc = _enc_keys(server.model, "online.") | _enc_keys(server.model, "target.")
    assert set(down.tensors) == enc | {"rot_head.weight", "rot_head.bias", "global_centroids"}
    assert not any("num_batches_tracked" in k for k in down.tensors)
    up, state = m.client_update(down, ClientState(), client_data(), ctx(2, 0))
    assert set(up.tensors) == (set(down.tensors) - {"global_centroids"}) | {"local_centroids"}
    assert all(t.dtype == torch.float32 for t in up.tensors.values())
    d = m.proj_dim()
    assert up.tensors["local_centroids"].shape == (8, d) and down.tensors[
        "global_centroids"
    ].shape == (6, d)
    assert up.tensors["rot_head.weight"].shape == (4, d) and up.tensors["rot_head.bias"].shape == (
        4,
    )
    assert state.tensors == {}  # stateless clients
    assert up.metrics["num_steps"] == 3 and {"loss_cluster", "loss_deg"} <= set(up.metrics)
    # aggregation: sizes 100 and 300, constant tensors 1 and 5 → 4.0 everywhere; centroids come from
    # clustering
    keys = [k for k in server.model]
    ups = {
        0: Payload(
            {
                **{k: torch.full_like(server.model[k], 1.0) for k in keys},
                "local_centroids": up.tensors["local_centroids"],
            },
            num_examples=100,
        ),
        1: Payload(
            {
                **{k: torch.full_like(server.model[k], 5.0) for k in keys},
                "local_centroids": up.tensors["local_centroids"],
            },
            num_examples=300,
        ),
    }
    new = Orchestra(
        OrchestraConfig(num_global_clusters=6, global_steps=0), MICRO, digits_inputs()
    ).server_aggregate(server, ups, ctx(2), None)
    assert all(torch.allclose(new.model[k], torch.full_like(new.model[k], 4.0)) for k in keys)
    # not averaged
    assert torch.equal(new.extra["global_centroids"], server.extra["global_centroids"])


def test_a_small_client_trains_and_one_of_one_image_uploads_weight_zero() -> None:
    """docs/protocols/small-clients.md (issue 46): a client with fewer images than a batch trains one
    batch of all of them; only a client of one image, which makes no batch, uploads with weight 0."""
    m = method()
    server = m.init_server(ctx(0))
    up, _ = m.client_update(m.broadcast(server, ctx(2)), ClientState(), client_data(n=8), ctx(2, 0))
    assert up.num_examples == 8
    up, _ = m.client_update(m.broadcast(server, ctx(2)), ClientState(), client_data(n=1), ctx(2, 0))
    assert up.num_examples == 0 and "local_centroids" not in up.tensors


def test_resnet18_bytes_match_spec() -> None:
    """docs/methods/orchestra.md §8 worked example (ResNet-18, CIFAR stem)."""
    r18 = ComponentSpec("resnet18_cifar", "1", {})
    for (ng, nl), down_b in (((32, 8), 93_720_080), ((256, 16), 94_178_832)):
        m = Orchestra(
            OrchestraConfig(num_global_clusters=ng, num_local_clusters=nl), r18, digits_inputs()
        )
        server = m.init_server(ctx(0))
        assert payload_nbytes(m.broadcast(server, ctx(1))) == 46_823_168
        down = m.broadcast(server, ctx(2))
        assert payload_nbytes(down) == down_b
        fake_up = {k: v for k, v in down.tensors.items() if k != "global_centroids"}
        fake_up["local_centroids"] = torch.zeros(nl, 512)
        assert payload_nbytes(Payload(fake_up)) == {8: 93_670_928, 16: 93_687_312}[nl]
    assert 8 * 512 * 4 == 16_384  # initialisation uplink, N_l = 8


def _formula(cell_method: Orchestra, clients: int, rounds: int) -> tuple[list[int], list[int]]:
    server = cell_method.init_server(ctx(0))
    model = server.model
    e_enc = sum(v.numel() for k, v in model.items() if k.startswith("target."))
    d = cell_method.proj_dim()
    cfg = cell_method.cfg
    up = [4 * cfg.num_local_clusters * d * clients] + [
        4 * (2 * e_enc + 4 * d + 4 + cfg.num_local_clusters * d) * clients
    ] * (rounds - 1)
    down = [4 * e_enc * clients] + [
        4 * (2 * e_enc + 4 * d + 4 + cfg.num_global_clusters * d) * clients
    ] * (rounds - 1)
    return up, down


@pytest.mark.slow
def test_record_bytes_rounds_and_resume(tmp_path: Path) -> None:
    """fl.rounds = 3 → init + 2 training rounds; the runner's counters equal §8; resume after round
    2 is exact."""
    # a quarter of the train split (tests/methods/small_data.py): the byte counters, resume and the
    # epochs counted do not depend on how many images a client has (~180: two batches of 64)
    cell = smoke_cell("orchestra", rounds=3, clients=2, tasks=["knn"], dataset=SMALL_DIGITS)
    straight = run_cell(cell, tmp_path / "a", device="cpu")
    assert straight is not None and straight.status == "ok" and straight.rounds_completed == 3
    m = Orchestra(OrchestraConfig(**dict(cell.method.params)), cell.backbone, digits_inputs())
    up, down = _formula(m, 2, 3)
    assert list(straight.comm.per_round_up) == up and list(straight.comm.per_round_down) == down
    # straight part re-used under a/
    _, resumed = run_straight_and_resumed(cell, tmp_path, stop_after_round=2)
    assert resumed.final_state_digest == straight.final_state_digest
    # issue 39: compute.client_epochs counts the epochs trained: the initialisation round trains
    # none (it used to count 3 rounds x 2 clients x 1 epoch = 6), and the samples are B per step
    # (drop_last)
    assert straight.compute.client_epochs == 2 * 2 * cell.fl.local_epochs
    batch = cell.method.params["batch_size"]
    assert straight.compute.client_samples == straight.compute.client_steps * batch > 0
    assert resumed.compute == dataclasses.replace(straight.compute, **_timings(resumed.compute))


def _timings(c) -> dict:
    return {
        k: getattr(c, k)
        for k in ("wall_time_s", "pretrain_time_s", "eval_time_s", "peak_mem_bytes")
    }


def _captured_step(m: Orchestra, n: int):
    """One client update of training round 2, with the views and target projections of every step
    captured."""
    import methods.orchestra as orch

    server = m.init_server(ctx(0))
    down = m.broadcast(server, ctx(2))
    views, targets, memories = [], [], []
    real_views, real_loss, real_local = m._views, orch.cluster_assignment_loss, m._local_centroids

    def spy_loss(z_online, z_target, centroids, temperature):
        targets.append(z_target.detach().clone())
        return real_loss(z_online, z_target, centroids, temperature)

    m._views = lambda batch, view, c: views.append(real_views(batch, view, c)) or views[-1]
    m._local_centroids = lambda memory, c: memories.append(memory.clone()) or real_local(memory, c)
    orch.cluster_assignment_loss = spy_loss
    try:
        up, _ = m.client_update(down, ClientState(), client_data(n=n), ctx(2, 0))
    finally:
        orch.cluster_assignment_loss = real_loss
    return down, up, views, targets, memories


def test_one_real_step_losses_gradient_and_ema() -> None:
    """docs/methods/orchestra.md §7 items 6-7 on one step of the method itself (not toy modules):
    with the step's own views, the reported L_cluster is −(1/B) Σ p^T log p^O and L_deg the
    cross-entropy of the rotation head on x3; the online weights after the step are one SGD step on
    L_cluster + w L_deg from the broadcast; every target parameter is then 0.996 target_old + 0.004
    online_new (EMA after the SGD step) and the target's BN buffers are those of its own forward
    pass on x1 (never averaged in from the online network)."""
    m = method()
    cfg = m.cfg
    down, up, views, _, _ = _captured_step(m, n=16)  # one batch of 16: exactly one step
    assert len(views) == 1 and up.metrics["num_steps"] == 1
    x1, x2, x3, r = views[0]
    net = m.build()
    from benchmark.api import load_tensors

    load_tensors(net, down.tensors)
    net.train()
    target_old = {k: v.clone() for k, v in net.target.named_parameters()}
    c = down.tensors["global_centroids"].float()
    z_o = F.normalize(net.online(x2), dim=1)
    with torch.no_grad():
        z_t = F.normalize(net.target(x1), dim=1)
    p_t = torch.softmax(z_t @ c.t() / cfg.temperature, dim=1)
    l_cluster = -(p_t * torch.log_softmax(z_o @ c.t() / cfg.temperature, dim=1)).sum(1).mean()
    logits = net.rot_head(net.online(x3))
    l_deg = -torch.log_softmax(logits, dim=1)[torch.arange(len(r)), r].mean()
    assert up.metrics["loss_cluster"] == pytest.approx(float(l_cluster.detach()), abs=1e-6)
    assert up.metrics["loss_deg"] == pytest.approx(float(l_deg.detach()), abs=1e-6)
    opt = torch.optim.SGD(
        [p for mod in (net.online, net.rot_head) for p in mod.parameters()],
        lr=cfg.lr,
        momentum=cfg.momentum,
        weight_decay=cfg.weight_decay,
    )
    (l_cluster + cfg.deg_weight * l_deg).backward()
    opt.step()
    for k, v in {
        **{f"online.{k}": v for k, v in net.online.state_dict().items()},
        **{f"rot_head.{k}": v for k, v in net.rot_head.state_dict().items()},
        **{f"target.{k}": v for k, v in net.target.state_dict().items() if "running" in k},
    }.items():
        if k.endswith("num_batches_tracked"):
            continue
        # the step, and each branch's own BN buffers
        assert torch.allclose(up.tensors[k], v, atol=1e-6), k
    online_new = dict(net.online.named_parameters())
    for k, old in target_old.items():
        want = cfg.ema * old + (1 - cfg.ema) * online_new[k].detach()
        assert torch.allclose(up.tensors[f"target.{k}"], want, atol=1e-7), k


def test_memory_after_real_steps_is_the_last_target_projections_in_push_order() -> None:
    """docs/methods/orchestra.md §7 item 9 on the method's own steps: after s = 4 steps at B = 16
    with room for 32, the memory clustered into the upload is exactly the last 32 target
    projections, in push order, unit norm."""
    m = method()  # memory_size 32, batch 16
    _, up, views, targets, memories = _captured_step(m, n=64)
    assert (
        len(views) == len(targets) == 4 and len(memories) == 1 and "local_centroids" in up.tensors
    )
    assert torch.equal(memories[0], torch.cat(targets)[-m.cfg.memory_capacity :])
    assert torch.allclose(memories[0].norm(dim=1), torch.ones(32), atol=1e-5)


def test_online_view_is_solarised_with_probability_solarize_p() -> None:
    """§2.10: A' (the online model's view) ends with PIL solarize at threshold 128, p = 0.2 [C];
    at p = 1 every view-2 image has its bright pixels inverted, at p = 0 none, and the default is
    the code's 0.2."""
    assert OrchestraConfig().solarize_p == 0.2
    data = client_data(32)
    view = data.train

    def x2(p: float) -> torch.Tensor:
        m = method(solarize_p=p)
        return m._views(view.images, view, ctx(2, 0))[1]

    on, off = x2(1.0), x2(0.0)
    mean = torch.tensor(view.mean).view(1, -1, 1, 1)
    std = torch.tensor(view.std).view(1, -1, 1, 1)
    raw_on, raw_off = on * std + mean, off * std + mean  # back to [0, 1]
    # same draws before the solarisation: where the unsolarised pixel is bright, p = 1 inverts it
    bright = raw_off >= 128 / 255
    assert bright.any()
    assert torch.allclose(raw_on[bright], 1 - raw_off[bright], atol=1e-5)
    assert torch.allclose(raw_on[~bright], raw_off[~bright], atol=1e-5)
