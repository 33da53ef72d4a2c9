"""FedMAE (docs/methods/fedmae.md §7 tests 4–8): payloads, `none` and `mean` state, the block pool,
the cascade's weights."""

from __future__ import annotations

import pytest
import torch

from benchmark.api import ClientData, ClientState, Payload, UnlabeledView
from benchmark.contracts.registries import load_builtins
from benchmark.contracts.specs import ComponentSpec
from benchmark.engine.rounds import SimSettings, client_context, payload_nbytes, server_context
from methods.fedmae import (
    FedMAE,
    FedMAEConfig,
    PoolEntry,
    cascade_tensors,
    pool_entries,
    pool_insert,
    pool_to_extra,
)
from tests.helpers import digits_inputs

load_builtins()
BLOCK = (
    "norm1.weight",
    "norm1.bias",
    "attn.qkv.weight",
    "attn.qkv.bias",
    "attn.proj.weight",
    "attn.proj.bias",
    "norm2.weight",
    "norm2.bias",
    "mlp.fc1.weight",
    "mlp.fc1.bias",
    "mlp.fc2.weight",
    "mlp.fc2.bias",
)
NAMES = {
    "mae.patch_embed.proj.weight",
    "mae.patch_embed.proj.bias",
    "mae.cls_token",
    *(f"mae.blocks.0.{b}" for b in BLOCK),
    "mae.norm.weight",
    "mae.norm.bias",
    "mae.decoder_embed.weight",
    "mae.decoder_embed.bias",
    "mae.mask_token",
    *(f"mae.decoder_blocks.0.{b}" for b in BLOCK),
    "mae.decoder_norm.weight",
    "mae.decoder_norm.bias",
    "mae.decoder_pred.weight",
    "mae.decoder_pred.bias",
}
SETTINGS = SimSettings(
    seed=0, num_rounds=3, local_epochs=1, per_round=1, device=torch.device("cpu")
)


def method(backbone: str = "vit_micro", bparams: dict | None = None, **cfg) -> FedMAE:
    return FedMAE(
        FedMAEConfig(batch_size=16, **cfg),
        ComponentSpec(backbone, "1", bparams or {}),
        digits_inputs(),
    )


def client(k: int, n: int = 32) -> ClientData:
    gen = torch.Generator().manual_seed(100 + k)
    images = torch.randint(0, 256, (n, 3, 16, 16), generator=gen, dtype=torch.uint8)
    return ClientData(k, n, UnlabeledView(images, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)))


def update(m: FedMAE, server, state: ClientState, k: int, r: int):
    down = m.broadcast(server, server_context(SETTINGS, r, None))
    return down, *m.client_update(down, state, client(k), client_context(SETTINGS, r, k, None))


def equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_payload_names_and_bytes() -> None:
    m = method()
    server = m.init_server(server_context(SETTINGS, 0, None))
    assert set(server.model) == NAMES and len(NAMES) == 36
    down, up, _ = update(m, server, ClientState(), 0, 1)
    assert (
        down.tensors == {}
        and set(up.tensors) == NAMES
        and up.num_examples == 32
        and "loss" in up.metrics
    )
    mm = method(aggregate="mean")
    down, up, state = update(
        mm, mm.init_server(server_context(SETTINGS, 0, None)), ClientState(), 0, 1
    )
    assert set(down.tensors) == NAMES and set(up.tensors) == NAMES and state.tensors == {}
    paper = method("vit_base_p16").initial_tensors(0)  # the up-link carries exactly these tensors
    assert set(paper) == NAMES and payload_nbytes(Payload(paper)) == 46_489_600


def test_none_mode_client_keeps_its_own_model() -> None:
    m = method()
    server = m.init_server(server_context(SETTINGS, 0, None))
    theta0 = dict(server.model)
    for k in (0, 1, 5):  # θ_0 is identical on all clients and equals the server's
        ctx = client_context(SETTINGS, 1, k, None)
        assert equal(dict(m.start_tensors(Payload({}), ClientState(), ctx)), theta0)
    _, up1, state0 = update(m, server, ClientState(), 0, 1)
    server = m.server_aggregate(server, {0: up1}, server_context(SETTINGS, 1, None), None)
    kept = {k: v.clone() for k, v in state0.tensors.items()}
    _, up2, _ = update(m, server, ClientState(), 1, 2)  # round 2: only client 1 trains
    server = m.server_aggregate(server, {1: up2}, server_context(SETTINGS, 2, None), None)
    assert equal(dict(state0.tensors), kept)  # other clients' training never changes it
    start3 = m.start_tensors(Payload({}), state0, client_context(SETTINGS, 3, 0, None))
    assert equal(dict(start3), dict(up1.tensors))  # round 3 starts bitwise from its round-1 upload
    assert not equal(dict(up1.tensors), theta0)
    assert equal(dict(server.model), theta0)  # ServerState.model stays θ_0


def test_mean_mode_weighted_average_and_start_point() -> None:
    m = method(aggregate="mean")
    server = m.init_server(server_context(SETTINGS, 0, None))
    a = {k: torch.zeros_like(v) for k, v in server.model.items()}
    b = {k: torch.ones_like(v) for k, v in server.model.items()}
    new = m.server_aggregate(
        server, {0: Payload(a, 1), 1: Payload(b, 3)}, server_context(SETTINGS, 1, None), None
    )
    assert all(torch.allclose(v, torch.full_like(v, 0.75)) for v in new.model.values())
    down = m.broadcast(new, server_context(SETTINGS, 2, None))
    for k in (0, 1):
        start = m.start_tensors(
            down, ClientState(tensors={}, last_round=1), client_context(SETTINGS, 2, k, None)
        )
        assert equal(dict(start), dict(new.model))


def fake(value: float) -> dict[str, torch.Tensor]:
    return {"mae.x": torch.tensor([value])}


def test_pool_order_replacement_and_size() -> None:
    pool: list[PoolEntry] = []
    pool = pool_insert(pool, {3: fake(1), 1: fake(2)}, 1, 4)
    pool = pool_insert(pool, {2: fake(3), 0: fake(4)}, 2, 4)
    assert [(e.round, e.client) for e in pool] == [(2, 0), (2, 2), (1, 1), (1, 3)]
    pool = pool_insert(pool, {1: fake(5)}, 3, 4)  # client 1 uploads again: its entry is replaced
    assert [(e.round, e.client) for e in pool] == [(3, 1), (2, 0), (2, 2), (1, 3)]
    pool = pool_insert(pool, {4: fake(6), 5: fake(7)}, 4, 4)  # at most pool_size entries
    assert [(e.round, e.client) for e in pool] == [(4, 4), (4, 5), (3, 1), (2, 0)]
    back = pool_entries(pool_to_extra(pool))
    assert [(e.round, e.client, float(e.tensors["mae.x"])) for e in back] == [
        (4, 4, 6),
        (4, 5, 7),
        (3, 1, 5),
        (2, 0, 4),
    ]


def test_server_pool_after_rounds() -> None:
    m = method(pool_size=3)
    server = m.init_server(server_context(SETTINGS, 0, None))
    for r, clients in ((1, (0, 1)), (2, (2,)), (3, (1, 3))):
        ups = {k: Payload(fake(10 * r + k)) for k in clients}
        server = m.server_aggregate(server, ups, server_context(SETTINGS, r, None), None)
    assert [(e.round, e.client) for e in pool_entries(server.extra)] == [(3, 1), (3, 3), (2, 2)]


def pooled_server(m: FedMAE, n: int):
    """A server whose pool holds n distinct random one-block MAEs (clients 0..n-1, round 1)."""
    server = m.init_server(server_context(SETTINGS, 0, None))
    ups = {}
    for k in range(n):
        ups[k] = Payload(m.initial_tensors(1000 + k), 1)
    return m.server_aggregate(server, ups, server_context(SETTINGS, 1, None), None), ups


def test_cascade_weights_first_last() -> None:
    m = method(bparams={"depth": 5})
    server, ups = pooled_server(m, 6)
    enc = m.encoder(server)
    sd = enc.module.state_dict()
    assert len(enc.module.blocks) == 5
    for i in range(5):  # block i = s_i.blocks.0 in pool order (clients 0..4)
        for b in BLOCK:
            assert torch.equal(sd[f"blocks.{i}.{b}"], ups[i].tensors[f"mae.blocks.0.{b}"])
    for name in ("patch_embed.proj.weight", "patch_embed.proj.bias", "cls_token"):
        assert torch.equal(sd[name], ups[0].tensors[f"mae.{name}"])
    for name in ("norm.weight", "norm.bias"):
        assert torch.equal(sd[name], ups[4].tensors[f"mae.{name}"])
    dec = enc.extras["mae"].state_dict()
    assert torch.equal(dec["decoder_pred.weight"], ups[4].tensors["mae.decoder_pred.weight"])
    assert torch.equal(dec["blocks.3.attn.qkv.weight"], sd["blocks.3.attn.qkv.weight"])


def test_cascade_fresh_trailing_blocks_and_global_copies() -> None:
    m = method(bparams={"depth": 5}, cascade_pretrained=3)
    server, ups = pooled_server(m, 6)
    sd = m.encoder(server).module.state_dict()
    with pytest.warns(UserWarning, match="freshly initialised"):  # empty pool: every block fresh
        fresh = m.cascaded_tensors(m.init_server(server_context(SETTINGS, 0, None)))
    for i in range(5):
        src = (
            ups[i].tensors["mae.blocks.0.mlp.fc1.weight"]
            if i < 3
            else fresh[f"mae.blocks.{i}.mlp.fc1.weight"]
        )
        assert torch.equal(sd[f"blocks.{i}.mlp.fc1.weight"], src)
    assert torch.equal(sd["norm.weight"], ups[2].tensors["mae.norm.weight"])  # s_{N_p}
    g = method(bparams={"depth": 5}, aggregate="mean", cascade_source="global_copies")
    server, _ = pooled_server(g, 2)
    sd = g.encoder(server).module.state_dict()
    for i in range(5):
        assert torch.equal(
            sd[f"blocks.{i}.attn.qkv.weight"], server.model["mae.blocks.0.attn.qkv.weight"]
        )


def test_cascade_mean_shared_tensors() -> None:
    s1 = {
        "mae.blocks.0.w": torch.tensor([1.0]),
        "mae.norm.weight": torch.tensor([2.0]),
        "mae.cls_token": torch.tensor([0.0]),
    }
    s2 = {
        "mae.blocks.0.w": torch.tensor([3.0]),
        "mae.norm.weight": torch.tensor([4.0]),
        "mae.cls_token": torch.tensor([1.0]),
    }
    fresh = {
        "mae.blocks.0.w": torch.tensor([9.0]),
        "mae.blocks.1.w": torch.tensor([9.0]),
        "mae.blocks.2.w": torch.tensor([8.0]),
        "mae.norm.weight": torch.tensor([9.0]),
        "mae.cls_token": torch.tensor([9.0]),
    }
    out = cascade_tensors([s1, s2], fresh, 3, shared="mean")
    assert [float(out[f"mae.blocks.{i}.w"]) for i in range(3)] == [1.0, 3.0, 8.0]
    assert float(out["mae.norm.weight"]) == 3.0 and float(out["mae.cls_token"]) == 0.5
    out = cascade_tensors([s1, s2], fresh, 3, shared="first_last")
    assert float(out["mae.norm.weight"]) == 4.0 and float(out["mae.cls_token"]) == 0.0


def test_config_guards() -> None:
    with pytest.raises(ValueError):
        FedMAEConfig(cascade_source="global_copies")  # needs aggregate="mean"
    with pytest.raises(ValueError):
        FedMAEConfig(server_pretrain_images=1000)
    with pytest.raises(ValueError):
        method(bparams={"depth": 2}, cascade_pretrained=3)
    with pytest.raises(ValueError):
        FedMAE(FedMAEConfig(), ComponentSpec("resnet_micro", "1", {}), digits_inputs())


@pytest.mark.slow
def test_mean_mode_resume_equivalence(tmp_path) -> None:
    """Spec test 11 in `mean` mode (the registry smoke test covers the default `none` mode): pool
    included."""
    from tests.helpers import run_straight_and_resumed, smoke_cell

    cell = smoke_cell(
        "fedmae",
        rounds=2,
        clients=3,
        participation=0.67,
        tasks=["reconstruction"],
        method_params={"aggregate": "mean"},
    )
    straight, resumed = run_straight_and_resumed(cell, tmp_path)
    assert resumed.final_state_digest == straight.final_state_digest
    assert [s.values for s in resumed.scores] == [s.values for s in straight.scores]


def test_cascade_ablations_share_one_pretraining(tmp_path) -> None:
    """The cascade (§2.6) is built on the server after training, so the Table 7-8 ablations (depth
    N, pre-trained blocks N_p, source, shared tensors, fresh-block seed) are cells of one
    pre-training: same pretrain_key, trained once (the cascade itself is checked weight for weight
    by the cascade tests above)."""
    from benchmark.engine.runner import run_cell
    from tests.helpers import smoke_cell

    kw = dict(rounds=1, clients=2, tasks=["knn"])
    cells = [
        smoke_cell("fedmae", method_params=p, **kw)
        for p in (
            {},
            {"cascade_pretrained": 0},
            {"cascade_pretrained": 1, "cascade_init": 3},
            {"cascade_shared": "mean"},
        )
    ]
    assert len({c.pretrain_key for c in cells}) == 1 and len({c.cell_id for c in cells}) == 4
    records = [run_cell(c, tmp_path) for c in cells]
    assert all(r.status == "ok" for r in records)
    # read back from the shared final.pt
    assert len({r.compute.pretrain_time_s for r in records}) == 1
    # same architecture, different weights
    assert len({r.backbone_fingerprint for r in records}) == 1
    # a training parameter still gets its own pre-training
    assert (
        smoke_cell("fedmae", method_params={"mask_ratio": 0.5}, **kw).pretrain_key
        != cells[0].pretrain_key
    )


def test_cells_of_two_partitions_never_share_a_final_state_digest(tmp_path) -> None:
    """Issue 39: FedMAE's server model is θ₀ and never changes (the trained blocks live in the pool,
    ``server.extra``): the IID and Dirichlet cells of one seed held one digest, so a checkpoint check
    bound nothing trained. Two partitions, one seed: the models are still equal, the trained pools
    and the digests are not."""
    from benchmark.engine.client_store import state_digest
    from benchmark.engine.stages import prepare, pretrain
    from benchmark.runroot.rundir import RunDir
    from tests.helpers import smoke_cell

    pres = []
    for partition in ("iid", {"name": "dirichlet", "alpha": 0.1}):
        cell = smoke_cell("fedmae", partition=partition, tasks=["knn"])
        pres.append(pretrain(prepare(cell), RunDir.of(cell, tmp_path).pretrain))
    a, b = pres
    assert state_digest(a.server.model) == state_digest(b.server.model)  # θ₀ on both
    assert state_digest(a.server.extra) != state_digest(b.server.extra)  # what was trained
    assert a.state_digest() != b.state_digest()


def test_lr_is_blr_times_batch_over_256(monkeypatch) -> None:
    """§3 (closest code): the AdamW lr is the base lr scaled linearly by the batch, blr · B / 256,
    constant; B = 16 with blr 1e-3 gives 6.25e-5, not blr."""
    from methods import fedmae

    seen: list[float] = []
    real = fedmae.adamw

    def spy(params, *, lr, betas):
        seen.append(lr)
        return real(params, lr=lr, betas=betas)

    monkeypatch.setattr(fedmae, "adamw", spy)
    m = method(blr=1e-3)
    update(m, m.init_server(server_context(SETTINGS, 0, None)), ClientState(), 0, 1)
    assert seen == [pytest.approx(1e-3 * 16 / 256)]
    assert FedMAEConfig(blr=1e-3, batch_size=64).lr == pytest.approx(1e-3 * 64 / 256)


@pytest.mark.parametrize("ratio", [0.75, 0.25])
def test_the_mask_ratio_sets_the_masked_share_of_each_training_step(ratio: float) -> None:
    """ρ = ``mask_ratio`` (Fig. 1, §3.3): every training step masks L − ⌊L (1 − ρ)⌋ of the L = 16
    patches of each image (12 at 0.75, 4 at 0.25): the share the config asks for, not a fixed one."""
    m = method(mask_ratio=ratio)
    net = m.nets.get(torch.device("cpu"))
    shares: list[float] = []
    real = net.forward_masked

    def spy(x, ids, len_keep):
        pred, mask = real(x, ids, len_keep)
        shares.append(float(mask.float().mean()))
        return pred, mask

    net.forward_masked = spy
    try:
        update(m, m.init_server(server_context(SETTINGS, 0, None)), ClientState(), 0, 1)
    finally:
        del net.forward_masked
    assert shares and all(s == pytest.approx(ratio) for s in shares)


def test_mae_views_crop_scale_is_02_to_1_and_reach_the_client_step(monkeypatch) -> None:
    """§2.4: MAE's pre-training views are RandomResizedCrop(scale (0.2, 1), bicubic) and a flip,
    nothing else (MAE ``main_pretrain.py``); the client's augmentation is the config's."""
    from methods import fedmae

    cfg = FedMAEConfig()
    assert cfg.augment.crop_scale == (0.2, 1.0)
    assert cfg.augment.interpolation == "bicubic" and cfg.augment.flip_p == 0.5
    assert (cfg.augment.jitter_p, cfg.augment.gray_p, cfg.augment.blur_p) == (0.0, 0.0, 0.0)
    seen = []
    real = fedmae.augment

    def spy(batch, aug, gen, **kw):
        seen.append(aug.crop_scale)
        return real(batch, aug, gen, **kw)

    monkeypatch.setattr(fedmae, "augment", spy)
    m = method()
    update(m, m.init_server(server_context(SETTINGS, 0, None)), ClientState(), 0, 1)
    assert seen and set(seen) == {(0.2, 1.0)}
