"""FLESD (docs/methods/flesd.md §7 items 4-6, 9-13, 15) and the public-data requirement of grid
expansion."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from benchmark.api import (
    ClientData,
    ClientState,
    ConfigError,
    Payload,
    RoundContext,
    Stream,
    UnlabeledView,
    np_rng,
    torch_gen,
)
from benchmark.contracts.specs import ComponentSpec
from benchmark.engine.rounds import payload_nbytes
from benchmark.engine.runner import run_cell
from benchmark.grids.expand import resolve_cell
from methods._shared.losses import crossview_1dir
from methods.flesd import (
    FLESD,
    AnchorQueue,
    FLESDConfig,
    ensemble_similarities,
    esd_batch,
    similarity_matrix,
)
from tests.helpers import digits_inputs, smoke_cell
from tests.methods.small_data import SMALL_DIGITS

MICRO = ComponentSpec("resnet_micro", "1", {"width": 4})
MEAN, STD = (0.5,) * 3, (0.25,) * 3


def ctx(
    round_: int, client: int | None = None, public: UnlabeledView | None = None
) -> RoundContext:
    stream = Stream.SERVER if client is None else Stream.CLIENT
    path = (round_,) if client is None else (round_, client)
    return RoundContext(
        round=round_,
        num_rounds=2,
        client_id=client,
        device=torch.device("cpu"),
        seed=0,
        rng=np_rng(0, stream, *path),
        generator=torch_gen(0, stream, *path),
        public=public,
    )


def images(n: int, seed: int) -> UnlabeledView:
    g = torch.Generator().manual_seed(seed)
    return UnlabeledView(
        torch.randint(0, 256, (n, 3, 16, 16), generator=g, dtype=torch.uint8), MEAN, STD
    )


def small(**kw) -> FLESD:
    cfg = FLESDConfig(
        **{
            "local_batch_size": 16,
            "distill_batch_size": 8,
            "queue_size": 16,
            "distill_epochs": 1,
            **kw,
        }
    )
    return FLESD(cfg, MICRO, digits_inputs())


def _bn_free() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 32), nn.ReLU(), nn.Linear(32, 8))


def test_distillation_zero_at_optimum_and_queue() -> None:
    pub = images(24, 1)
    x = pub.normalize(pub.images)
    model = _bn_free().eval()
    with torch.no_grad():
        emb = model(x)
    ebar = ensemble_similarities([similarity_matrix(emb)], 0.1)
    student, mom = model, copy.deepcopy(model)
    queue = AnchorQueue(keys=F.normalize(emb[:16], dim=1).clone(), index=torch.arange(16))
    rows = torch.arange(8, 16)
    ce, kl = esd_batch(
        student, mom, queue, x[rows], x[rows], rows, ebar, tau_student=0.1, zeta=0.999
    )
    p = ebar[rows][:, queue.index] / ebar[rows][:, queue.index].sum(1, keepdim=True)
    entropy = -(p * p.log()).sum(1).mean()
    assert float(kl) <= 1e-6 and abs(float(ce) - float(entropy)) < 1e-5
    # queue: the current keys at [ptr, ptr + B'), their indices in qidx; own index carries the
    # largest target
    assert queue.ptr == 8 and torch.equal(queue.index[:8], rows)
    assert torch.allclose(queue.keys[:8], F.normalize(emb[rows], dim=1), atol=1e-6)
    own = (queue.index[None, :] == rows[:, None]).float().argmax(1)
    assert torch.equal(p.argmax(1), own)
    with pytest.raises(ValueError):
        AnchorQueue(keys=torch.zeros(20, 8), index=torch.zeros(20, dtype=torch.long)).enqueue(
            torch.zeros(8, 8), rows
        )
    with pytest.raises(ValueError):
        FLESDConfig(queue_size=100, distill_batch_size=64)


def test_momentum_update_before_keys() -> None:
    pub = images(16, 2)
    x = pub.normalize(pub.images)
    student = _bn_free()
    mom = copy.deepcopy(student)
    with torch.no_grad():
        for p in mom.parameters():
            p.mul_(0.5)
    old = [p.clone() for p in mom.parameters()]
    queue = AnchorQueue.random(16, 8, torch.Generator().manual_seed(0), torch.device("cpu"))
    rows = torch.arange(8)
    esd_batch(
        student, mom, queue, x[:8], x[8:], rows, torch.ones(16, 16), tau_student=0.1, zeta=0.9
    )
    for m, o, s in zip(mom.parameters(), old, student.parameters()):
        assert torch.allclose(m, 0.9 * o + 0.1 * s, atol=1e-7)
    esd_batch(
        student, mom, queue, x[:8], x[8:], rows, torch.ones(16, 16), tau_student=0.1, zeta=0.0
    )
    with torch.no_grad():
        assert torch.allclose(queue.keys[8:], F.normalize(student(x[8:]), dim=1), atol=1e-6)


def test_client_payloads_and_upload_modes_agree() -> None:
    pub = images(40, 3)
    data = ClientData(client_id=0, num_examples=32, train=images(32, 4))
    ebars, kls = {}, {}
    for upload in ("embeddings", "similarity"):
        m = small(upload=upload)
        server = m.init_server(ctx(0))
        down = m.broadcast(server, ctx(1))
        assert set(down.tensors) == {k for k in server.model}
        assert all(
            k.startswith(("backbone.", "head.")) and "num_batches_tracked" not in k
            for k in down.tensors
        )
        assert any(k.endswith("running_var") for k in down.tensors)
        up, state = m.client_update(down, ClientState(), data, ctx(1, 0, pub))
        assert state.tensors == {}
        if upload == "embeddings":
            assert set(up.tensors) == {"embeddings"} and up.tensors["embeddings"].shape == (40, 128)
        else:
            assert set(up.tensors) == {"sim_matrix"} and up.tensors["sim_matrix"].shape == (40, 40)
        ebars[upload] = ensemble_similarities([m.similarity_of(up, 40, torch.device("cpu"))], 0.1)
        _, stats = m.distill(server.model, ebars[upload], pub, ctx(1, None, pub))
        kls[upload] = stats["esd_kl"]
    assert torch.allclose(ebars["embeddings"], ebars["similarity"], atol=1e-5)
    assert abs(kls["embeddings"] - kls["similarity"]) < 1e-5
    m = small(upload="similarity", topk_percent=10)
    up, _ = m.client_update(
        m.broadcast(m.init_server(ctx(0)), ctx(1)), ClientState(), data, ctx(1, 0, pub)
    )
    assert set(up.tensors) == {"sim_topk_values", "sim_topk_indices"}
    assert (
        up.tensors["sim_topk_values"].shape == (40, 4)
        and up.tensors["sim_topk_indices"].dtype == torch.int32
    )


def test_warm_start_and_student_returned() -> None:
    pub = images(32, 5)
    m = small()
    server = m.init_server(ctx(0))
    ebar = torch.ones(32, 32)
    same, _ = small(distill_epochs=0).distill(server.model, ebar, pub, ctx(1, None, pub))
    # θ starts at w^(t-1) bitwise
    assert all(torch.equal(same[k], server.model[k]) for k in server.model)
    out, stats = small(key_momentum=1.0, distill_epochs=2).distill(
        server.model, ebar, pub, ctx(1, None, pub)
    )
    assert stats["esd_steps"] == 2 * (4 - 2)
    # θ, not μ
    assert any(
        not torch.equal(out[k], server.model[k]) for k in server.model if k.endswith("weight")
    )


def test_local_loss() -> None:
    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(6, 8, generator=g, requires_grad=True)
    z2 = torch.randn(6, 8, generator=g, requires_grad=True)
    loss = crossview_1dir(z1, z2, 0.4)
    ref = F.cross_entropy(
        F.normalize(z1, dim=1) @ F.normalize(z2, dim=1).t() / 0.4, torch.arange(6)
    )
    assert abs(float(loss) - float(ref)) < 1e-6
    loss.backward()
    assert (
        z1.grad is not None
        and z2.grad is not None
        and z1.grad.abs().sum() > 0
        and z2.grad.abs().sum() > 0
    )
    assert float(crossview_1dir(z1[:1], z2[:1], 0.4)) == 0.0


def test_grid_refuses_flesd_without_public() -> None:
    values = {
        "dataset": "digits",
        "backbone": {"name": "resnet_micro"},
        "method": "flesd",
        "partition": "iid",
        "fl": {"num_clients": 2, "rounds": 1},
    }
    with pytest.raises(
        ConfigError, match="method 'flesd' needs public data, but the cell has none"
    ):
        resolve_cell(values)
    assert resolve_cell({**values, "public": {"name": "first_shard"}}).public.name == "first_shard"


def test_public_roles_first_shard() -> None:
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.stages import build_partition

    cell = smoke_cell(
        "flesd",
        clients=5,
        public={"name": "first_shard"},
        partition={"name": "flesd_minshare", "alpha": 1.0},
    )
    labels = load_dataset_splits("digits", dict(cell.dataset.params)).train.labels
    part = build_partition(cell, labels)
    assert len(part.client_indices) == 5  # 5 training clients; shard 0 of 6 is D_pub
    pub = set(part.public_indices.tolist())
    assert pub and all(not pub & set(ix.tolist()) for ix in part.client_indices)
    # FedAvg-SimCLR on the same flesd_minshare shards without a public carve trains all 6
    fedavg = smoke_cell(
        "fedavg_simclr", clients=6, partition={"name": "flesd_minshare", "alpha": 1.0}
    )
    full = build_partition(fedavg, labels)
    assert len(full.client_indices) == 6 and full.public_indices is None
    assert set(full.client_indices[0].tolist()) == pub  # shard 0 is exactly D_pub


def test_resnet18_bytes_match_spec() -> None:
    m = FLESD(FLESDConfig(), ComponentSpec("resnet18_cifar", "1", {}), digits_inputs())
    assert payload_nbytes(m.broadcast(m.init_server(ctx(0)), ctx(1))) == 46_027_008
    emb = torch.randn(8333, 128, generator=torch.Generator().manual_seed(0))
    assert payload_nbytes(Payload(m.upload(emb))) == 4_266_496
    top1 = FLESD(FLESDConfig(upload="similarity", topk_percent=1), m.backbone, digits_inputs())
    assert payload_nbytes(Payload(top1.upload(emb))) == 5_533_112


@pytest.mark.slow
def test_resnet18_dense_similarity_bytes() -> None:
    emb = torch.randn(8333, 128, generator=torch.Generator().manual_seed(0))
    dense = FLESD(
        FLESDConfig(upload="similarity"), ComponentSpec("resnet18_cifar", "1", {}), digits_inputs()
    )
    assert payload_nbytes(Payload(dense.upload(emb))) == 277_755_556


@pytest.mark.slow
def test_record_bytes_dense_vs_topk(tmp_path: Path) -> None:
    """The runner's counters follow §8 for the three upload forms; top-k cuts the dense uplink."""
    recs = {}
    for name, params in (
        ("emb", {}),
        ("dense", {"upload": "similarity"}),
        ("topk", {"upload": "similarity", "topk_percent": 10.0}),
    ):
        # a quarter of the train split (tests/methods/small_data.py): the counters follow §8 for
        # any public split's size n, read below from the cell's own partition
        cell = smoke_cell(
            "flesd", clients=2, tasks=["knn"], method_params=params, dataset=SMALL_DIGITS
        )
        recs[name] = run_cell(cell, tmp_path / name, device="cpu")
        assert recs[name].status == "ok" and recs[name].uses_public_data
    from benchmark.data.datasets import load_dataset_splits
    from benchmark.engine.stages import build_partition

    splits = load_dataset_splits("digits", dict(cell.dataset.params))
    n = len(build_partition(cell, splits.train.labels).public_indices)
    k = int(10.0 * n // 100)
    assert recs["emb"].comm.bytes_up == 2 * n * 128 * 4
    assert recs["dense"].comm.bytes_up == 2 * n * n * 4
    assert recs["topk"].comm.bytes_up == 2 * n * k * 8 < recs["dense"].comm.bytes_up
    model = FLESD(FLESDConfig(), cell.backbone, digits_inputs()).init_server(ctx(0)).model
    assert recs["dense"].comm.bytes_down == 2 * 4 * sum(v.numel() for v in model.values())


def test_the_public_split_size_and_class_histogram_are_logged(tmp_path: Path) -> None:
    """docs/methods/flesd.md §6 item 12: D_pub is non-IID and its size varies with alpha: N and its
    class histogram are logged in the record's partition statistics (and in partition.json): read
    from what the run wrote, not recomputed."""
    import numpy as np

    from benchmark.engine.stages import build_partition, load_data
    from benchmark.runroot.rundir import RunDir

    cell = smoke_cell("flesd", clients=3, tasks=["knn"])
    rec = run_cell(cell, tmp_path, device="cpu")
    assert rec is not None and rec.status == "ok"
    labels = load_data(cell, None).train.labels
    part = build_partition(cell, labels)
    want = np.bincount(np.asarray(labels)[part.public_indices], minlength=10).tolist()
    rd = RunDir.of(cell, tmp_path)
    written = (rec.partition_stats, rd.read_record().partition_stats, rd.read_partition()["stats"])
    for stats in written:
        assert "public_class_counts" in stats, sorted(stats)
        hist = stats["public_class_counts"]
        assert sum(hist) == stats["public"] == len(part.public_indices) > 0
        assert hist == want


def test_server_ensemble_sharpens_at_tau_teacher(monkeypatch) -> None:
    """Eq. 5-6: the server's distillation targets come from Ē = (1/K) Σ_k exp((M_k − 1) / τ_T), at
    the configured τ_T (0.07 here), with M_k the cosine similarities of client k's uploaded
    embeddings (written out here, not through the method's helpers)."""
    captured = {}

    def fake_distill(self, model, ebar, public, ctx):
        captured["ebar"] = ebar.clone()
        return dict(model), {}

    monkeypatch.setattr(FLESD, "distill", fake_distill)
    m = small(tau_teacher=0.07)
    public = images(12, 7)
    g = torch.Generator().manual_seed(3)
    embs = [torch.randn(12, 128, generator=g) for _ in range(2)]
    ups = {k: Payload({"embeddings": e}, num_examples=10) for k, e in enumerate(embs)}
    m.server_aggregate(m.init_server(ctx(0)), ups, ctx(1), public)
    sims = [F.normalize(e, dim=1) @ F.normalize(e, dim=1).t() for e in embs]
    want = sum(torch.exp((s - 1) / 0.07) for s in sims) / 2
    assert torch.allclose(captured["ebar"], want, rtol=1e-5, atol=1e-7)


def test_local_step_uses_local_tau(monkeypatch) -> None:
    """§2.6 (paper §2: τ = 0.4 on CIFAR): the local contrastive loss runs at ``local_tau``; every
    step of a client with local_tau 0.37 calls it with 0.37."""
    from methods._shared import losses

    seen: list[float] = []
    real = losses.CONTRASTIVE_LOSSES["crossview_1dir"]

    def spy(z1, z2, tau):
        seen.append(tau)
        return real(z1, z2, tau)

    monkeypatch.setitem(losses.CONTRASTIVE_LOSSES, "crossview_1dir", spy)
    m = small(local_tau=0.37)
    data = ClientData(0, 32, images(32, 1))
    m.client_update(
        m.broadcast(m.init_server(ctx(0)), ctx(1)), ClientState(), data, ctx(1, 0, images(8, 2))
    )
    assert seen and set(seen) == {0.37}


def test_a_last_local_batch_of_one_image_is_dropped() -> None:
    """docs/official-code.md (FLESD, a last local batch of one image): 33 images at B = 32 give one
    step of 32; the official loader (drop_last False, any size) takes a second step on the one
    image left."""
    m = small(local_batch_size=32)
    data = ClientData(0, 33, images(33, 1))
    up, _ = m.client_update(
        m.broadcast(m.init_server(ctx(0)), ctx(1)), ClientState(), data, ctx(1, 0, images(8, 2))
    )
    assert up.metrics["steps"] == 1 and up.metrics["samples"] == 32


def test_infer_feeds_the_stored_images_without_a_resize() -> None:
    """docs/official-code.md (FLESD, ImageNet-100 public-set inference): the head sees every D_pub
    image at its stored size, normalised with the training statistics, in order: no resize to 256
    and centre crop of 224 (the engine stores the split at 224 already)."""
    m = small()
    public = images(10, 4)
    seen: list[torch.Tensor] = []

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(x.clone())
            return x.flatten(1)[:, :4]

    out = m.infer(Probe(), public, torch.device("cpu"))
    x = torch.cat(seen)
    assert x.shape == (10, 3, 16, 16) and out.shape == (10, 4)
    mean = torch.tensor(MEAN).view(1, -1, 1, 1)
    std = torch.tensor(STD).view(1, -1, 1, 1)
    assert torch.allclose(x, (public.images.float() / 255 - mean) / std, atol=1e-6)


def test_infer_runs_the_network_in_eval_mode() -> None:
    """§2.6 step 3: the D_pub embeddings are inferred in eval mode (BN running statistics, no
    update of them), whatever mode the client's network was trained in."""
    m = small()
    modes: list[bool] = []

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            modes.append(self.training)
            return x.flatten(1)[:, :4]

    probe = Probe().train()
    m.infer(probe, images(10, 4), torch.device("cpu"))
    assert modes and not any(modes)
