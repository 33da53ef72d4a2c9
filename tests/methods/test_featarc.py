"""FeatARC faithfulness tests: the items of docs/methods/featarc.md §9 (numbers in the comments are
the spec's)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

from benchmark.api import ComponentSpec, Payload, select
from benchmark.core.config import ConfigError
from benchmark.engine.runner import run_cell
from benchmark.runroot.rundir import RunDir
from methods.featarc import FeatARC, FeatARCConfig, largest_cluster, preset
from tests.helpers import digits_inputs, smoke_cell
from tests.methods.byol_testkit import make_kit
from tests.methods.small_data import SMALL_DIGITS


def final_of(cell, root: Path) -> dict:
    return torch.load(RunDir.of(cell, root).pretrain.final, weights_only=False)


@pytest.fixture(scope="module")
def featarc_vs_fedavg(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("fa")
    # a quarter of the train split (tests/methods/small_data.py): bit-exactness, the byte counts and
    # the assignments kept per round do not depend on how much each client trains
    kw = {"rounds": 2, "clients": 6, "participation": 0.34, "tasks": [], "dataset": SMALL_DIGITS}
    fa = smoke_cell("featarc", method_params={"num_clusters": 1, "reg_scale": 0.0}, **kw)
    fa2 = smoke_cell("featarc", **kw)
    fv = smoke_cell("fedavg_simclr", **kw)
    out = {}
    for name, cell in (("c1", fa), ("c2", fa2), ("fedavg", fv)):
        out[name] = (run_cell(cell, root, device="cpu"), final_of(cell, root))
    return out


@pytest.mark.slow
def test_c1_lambda0_is_fedavg_simclr_bit_exactly(featarc_vs_fedavg) -> None:
    """§9.1: C = 1, λ = 0 reproduces fedavg_simclr bit-exactly (2 rounds, partial participation)."""
    (rec_a, fin_a), (rec_f, fin_f) = featarc_vs_fedavg["c1"], featarc_vs_fedavg["fedavg"]
    model = select(fin_a["model"], "cluster0.", strip=True)
    assert model.keys() == fin_f["model"].keys()
    for k, v in fin_f["model"].items():
        assert torch.equal(model[k], v), k
    assert rec_a.comm.per_round_down == rec_f.comm.per_round_down


@pytest.mark.slow
def test_bytes_formula(featarc_vs_fedavg) -> None:
    """§9.10: down = C × FedAvg down; up = FedAvg up + 4C bytes per participant."""
    rec2, rec_f = featarc_vs_fedavg["c2"][0], featarc_vs_fedavg["fedavg"][0]
    rec1 = featarc_vs_fedavg["c1"][0]
    assert rec2.comm.per_round_down == tuple(2 * d for d in rec_f.comm.per_round_down)
    participants = 2
    assert rec2.comm.per_round_up == tuple(
        u + participants * 4 * 2 for u in rec_f.comm.per_round_up
    )
    assert rec1.comm.per_round_up == tuple(
        u + participants * 4 * 1 for u in rec_f.comm.per_round_up
    )


def test_bytes_resnet18_oracle() -> None:
    """§8 worked example: (P + S) b = 46,823,168 B; C = 2 → down 93,646,336 B, up 46,823,176 B."""
    from benchmark.engine.client_store import tensors_nbytes
    from benchmark.engine.rounds import SimSettings, payload_nbytes, server_context

    m = FeatARC(
        FeatARCConfig(), ComponentSpec("resnet18_cifar", "1", {"width": 64}), digits_inputs()
    )
    s = SimSettings(seed=0, num_rounds=1, local_epochs=0, per_round=1, device=torch.device("cpu"))
    down = m.broadcast(m.init_server(server_context(s, 0, None)), server_context(s, 1, None))
    assert payload_nbytes(down) == 93_646_336
    from benchmark.api import tensors_of
    from methods.featarc import onehot

    up = {**tensors_of(m.build()), "assign": onehot(0, 2)}
    assert tensors_nbytes(up) == 46_823_176


@pytest.mark.slow
def test_c_equals_k_keeps_clients_in_their_cluster_and_matches_local_ssl() -> None:
    """§9.2: C = K, λ = 0, p = 1: client i stays in cluster i; client 0 follows local_ssl's
    trajectory."""
    # a quarter of the train split (tests/methods/small_data.py): two trajectories equal bit for
    # bit over two rounds, whatever each round trains on
    small = {"dataset": SMALL_DIGITS}
    kit = make_kit(
        "featarc", clients=2, method_params={"num_clusters": 2, "reg_scale": 0.0}, **small
    )
    loc = make_kit("local_ssl", clients=2, **small)
    m, lm = kit.method, loc.method
    server, lserver = kit.server(), loc.server()
    states = {k: m.init_client(k, server) for k in (0, 1)}
    lstate = lm.init_client(0, lserver)
    for r in (1, 2):
        down = m.broadcast(server, kit.sctx(r))
        ups = {}
        for k in (0, 1):
            ups[k], states[k] = m.client_update(down, states[k], kit.clients[k], kit.ctx(r, k))
            assert ups[k].metrics["cluster"] == k
        server = m.server_aggregate(server, ups, kit.sctx(r), None)
        _, lstate = lm.client_update(
            lm.broadcast(lserver, loc.sctx(r)), lstate, loc.clients[0], loc.ctx(r, 0)
        )
    mine = select(states[0].tensors, "local.", strip=True)
    for k, v in mine.items():
        assert torch.equal(v, lstate.tensors[k]), k


def test_first_participation_picks_i_mod_c() -> None:
    """§9.3: in round 1 the local model is the initial cluster i mod C, so I_i = i mod C."""
    kit = make_kit("featarc", clients=3)
    m = kit.method
    server = kit.server()
    down = m.broadcast(server, kit.sctx(1))
    for k in range(3):
        up, st = m.client_update(down, m.init_client(k, server), kit.clients[k], kit.ctx(1, k, 0))
        assert up.metrics["cluster"] == k % 2 and int(st.tensors["cluster"]) == k % 2
        assert torch.equal(up.tensors["assign"], torch.eye(2)[k % 2])


def test_assignment_is_eval_mode_clean_and_leaves_bn_alone() -> None:
    """§9.4: features are eval-mode forwards of the clean (normalised, un-augmented) images; BN
    stats untouched."""
    kit = make_kit("featarc", clients=2)
    m = kit.method
    server = kit.server()
    down = m.broadcast(server, kit.sctx(1))
    before = {k: v.clone() for k, v in down.tensors.items()}
    view = kit.clients[0].train
    net = m.nets.get(torch.device("cpu"))
    local = m.init_cluster(0, 0)
    I, scores, feats = m.assign(down, local, view, net, torch.device("cpu"))
    ref = m.build()
    from benchmark.api import load_tensors

    load_tensors(ref, m.cluster_tensors(down.tensors, 1))
    ref.eval()
    with torch.no_grad():
        z = torch.nn.functional.normalize(ref.encoder(view.normalize(view.images)), dim=1)
    assert torch.allclose(feats[1], z, atol=1e-5)
    # the working net's BN stats are those loaded
    for k, v in m.cluster_tensors(down.tensors, 1).items():
        assert torch.equal(net.state_dict()[k], v), k
    assert all(torch.equal(before[k], down.tensors[k]) for k in before)
    assert I == int(torch.argmin(scores)) and scores.shape == (2,)


def test_cluster_models_unchanged_by_local_training() -> None:
    """§9.5: the cluster models (down-link) are not modified by the client's training (targets
    detached)."""
    kit = make_kit("featarc", clients=2)
    m = kit.method
    down = m.broadcast(kit.server(), kit.sctx(1))
    before = {k: v.clone() for k, v in down.tensors.items()}
    up, _ = m.client_update(down, m.init_client(0, kit.server()), kit.clients[0], kit.ctx(1, 0))
    assert up.metrics["steps"] > 0
    assert all(torch.equal(before[k], down.tensors[k]) for k in before)


def test_dimension_guard() -> None:
    """§9.6: a projector output size different from the backbone feature size raises."""
    spec = ComponentSpec("resnet_micro", "1", {"width": 4})
    with pytest.raises(ValueError, match="dimensions must match"):
        FeatARC(FeatARCConfig(proj_out=7), spec, digits_inputs())
    FeatARC(
        FeatARCConfig(proj_out=7, align_local="projector", align_target="projector"),
        spec,
        digits_inputs(),
    )


def test_aggregation_members_empty_and_order() -> None:
    """§9.7: only members contribute; an empty cluster is unchanged bitwise; upload order does not
    matter."""
    kit = make_kit("featarc", clients=3)
    m = kit.method
    server = kit.server()
    names = list(m.cluster_tensors(server.model, 0))

    def up(value: float, j: int, n: int) -> Payload:
        t = {k: torch.full_like(server.model["cluster0." + k], value) for k in names}
        return Payload({**t, "assign": torch.eye(2)[j]}, num_examples=n)

    ups = {2: up(3.0, 0, 3), 0: up(1.0, 0, 1)}
    out = m.server_aggregate(server, ups, kit.sctx(1), None)
    out2 = m.server_aggregate(server, dict(sorted(ups.items())), kit.sctx(1), None)
    for k in names:
        assert torch.allclose(
            out.model["cluster0." + k], torch.full_like(out.model["cluster0." + k], 2.5)
        )
        assert torch.equal(out.model["cluster1." + k], server.model["cluster1." + k])
        assert torch.equal(out.model["cluster0." + k], out2.model["cluster0." + k])
    assert out.extra["assign"].tolist() == [0, 1, 0] and out.extra["n"].tolist() == [1, 0, 3]


def test_aggregation_aligns_uploads_weights_and_assignments_by_client_id() -> None:
    """The kept difference of docs/official-code.md (FeatARC, per-cluster averaging): uploads in
    sampling order {2, 0, 1} go to different clusters with different weights; each cluster model is
    the n_k-weighted average of its own members' uploads. The official order (uploads in mapping
    order, assignments or weights looked up in id order) gives cluster 1 client 2's upload, or
    cluster 0 another average."""
    kit = make_kit("featarc", clients=3)
    m = kit.method
    server = kit.server()
    names = list(m.cluster_tensors(server.model, 0))

    def up(value: float, j: int, n: int) -> Payload:
        t = {k: torch.full_like(server.model["cluster0." + k], value) for k in names}
        return Payload({**t, "assign": torch.eye(2)[j]}, num_examples=n)

    # sampling order 2, 0, 1: client 2 (3.0, cluster 0, n 3), client 0 (1.0, cluster 1, n 1),
    # client 1 (5.0, cluster 0, n 2)
    ups = {2: up(3.0, 0, 3), 0: up(1.0, 1, 1), 1: up(5.0, 0, 2)}
    out = m.server_aggregate(server, ups, kit.sctx(1), None)
    want = {0: (3.0 * 3 + 5.0 * 2) / 5, 1: 1.0}
    for j, value in want.items():
        for k in names:
            got = out.model[f"cluster{j}." + k]
            assert torch.allclose(got, torch.full_like(got, value)), (j, k)
    assert out.extra["assign"].tolist() == [1, 0, 0] and out.extra["n"].tolist() == [1, 2, 3]


def test_cluster_mass_counts_examples_under_num_batches() -> None:
    """featarc.md §3: m_j = Σ n_k in examples. Under ``weighting: num_batches`` the weight is a
    batch count, so the client also sends n_k ("size"); the server's sizes and masses use it."""
    params = {"weighting": "num_batches", "batch_size": 16}
    kit = make_kit("featarc", clients=3, method_params=params)
    m = kit.method
    server = kit.server()
    down = m.broadcast(server, kit.sctx(1))
    sizes = [kit.clients[k].num_examples for k in range(3)]
    ups = {
        k: m.client_update(down, m.init_client(k, server), kit.clients[k], kit.ctx(1, k))[0]
        for k in range(3)
    }
    for k, up in ups.items():
        assert int(up.tensors["size"]) == sizes[k]
        assert up.num_examples == up.metrics["steps"] < sizes[k]
    assert m.server_aggregate(server, ups, kit.sctx(1), None).extra["n"].tolist() == sizes
    # cluster 0: one client of 63 examples in 1 batch; cluster 1: two of 20 in 1 batch each.
    # By examples cluster 0 is the largest (63 > 40), by batches cluster 1 (2 > 1).
    names = list(m.cluster_tensors(server.model, 0))

    def up(j: int, batches: int, n: int) -> Payload:
        t = {k: server.model["cluster0." + k].clone() for k in names}
        t["assign"], t["size"] = torch.eye(2)[j], torch.tensor([n])
        return Payload(t, num_examples=batches)

    ups = {0: up(0, 1, 63), 1: up(1, 1, 20), 2: up(1, 1, 20)}
    out = m.server_aggregate(server, ups, kit.sctx(1), None)
    assert out.extra["n"].tolist() == [63, 20, 20]
    assert (out.metrics["cluster_mass0"], out.metrics["cluster_mass1"]) == (63, 40)
    assert out.metrics["reported_cluster"] == 0 and m.reported_cluster(out) == 0


def test_no_size_upload_when_the_weight_is_the_size() -> None:
    kit = make_kit("featarc", clients=1)
    m = kit.method
    server = kit.server()
    down = m.broadcast(server, kit.sctx(1))
    up, _ = m.client_update(down, m.init_client(0, server), kit.clients[0], kit.ctx(1, 0))
    assert "size" not in up.tensors and up.num_examples == kit.clients[0].num_examples


def test_partial_participation_keeps_stale_local_model() -> None:
    """§9.8: a non-participant keeps its local model and assignment; that stale model is used next
    time."""
    kit = make_kit("featarc", clients=3)
    m = kit.method
    server = kit.server()
    down = m.broadcast(server, kit.sctx(1))
    ups, states = {}, {}
    for k in range(3):
        ups[k], states[k] = m.client_update(
            down, m.init_client(k, server), kit.clients[k], kit.ctx(1, k)
        )
    server = m.server_aggregate(server, ups, kit.sctx(1), None)
    saved = {k: v.clone() for k, v in states[2].tensors.items()}
    down2 = m.broadcast(server, kit.sctx(2))
    ups2 = {}
    for k in (0, 1):  # client 2 not sampled
        ups2[k], states[k] = m.client_update(down2, states[k], kit.clients[k], kit.ctx(2, k))
    server = m.server_aggregate(server, ups2, kit.sctx(2), None)
    assert int(server.extra["assign"][2]) == int(saved["cluster"])
    assert server.extra["assign_history"][1, 2] == -1
    down3 = m.broadcast(server, kit.sctx(3))
    I, scores, _ = m.assign(
        down3,
        select(saved, "local.", strip=True),
        kit.clients[2].train,
        m.nets.get(torch.device("cpu")),
        torch.device("cpu"),
    )
    up3, _ = m.client_update(down3, states[2], kit.clients[2], kit.ctx(3, 2, 0))
    assert up3.metrics["cluster"] == I and up3.metrics["align_score0"] == float(scores[0])


def test_reporting_uses_training_side_information_only() -> None:
    """§9.9: the selection function takes (assignments, sizes) only; ties go to the smaller
    index."""
    params = list(inspect.signature(largest_cluster).parameters)
    assert params == ["assign", "sizes", "num_clusters"]
    assert largest_cluster([0, 1], [5, 5], 2) == 0 and largest_cluster([1, 1, 0], [2, 2, 3], 2) == 1
    with pytest.raises((ConfigError, TypeError, ValueError)):
        from benchmark.core.config import from_mapping

        from_mapping(FeatARCConfig, {"report_model": "best_on_test"})


def test_max_over_clusters_is_flagged_as_selecting_on_test(tmp_path) -> None:
    """§3 / §9.9: the code-behaviour mode scores every cluster model and reports the maximum; its
    cards carry ``selects_on_test`` (so the leaderboard keeps them out of main columns), the
    per-cluster scores and the mass-weighted mean are reported beside it; the default mode's cards
    select nothing, its value is the largest cluster's score, and every cluster's score and their
    mass-weighted mean are logged beside it (§3)."""
    tasks = ["knn", {"name": "linear_probe", "epochs": 1}]
    # a quarter of the train split (tests/methods/small_data.py): which score is reported and how it
    # is flagged does not depend on how well the clusters trained
    kw = {"rounds": 1, "clients": 3, "tasks": tasks, "dataset": SMALL_DIGITS}
    cell_max = smoke_cell("featarc", method_params={"report_model": "max_over_clusters"}, **kw)
    cell_def = smoke_cell("featarc", **kw)
    # report_model only chooses what is exported: both cells share one pre-training, trained once
    assert cell_max.pretrain_key == cell_def.pretrain_key and cell_max.cell_id != cell_def.cell_id
    rec_max = run_cell(cell_max, tmp_path)
    rec_def = run_cell(cell_def, tmp_path)
    assert rec_max.status == rec_def.status == "ok"
    # read back from the shared final.pt
    assert rec_def.compute.pretrain_time_s == rec_max.compute.pretrain_time_s
    for s in rec_max.scores:
        per = s.extra["per_member"]
        assert len(per) == 2 and s.values["top1"] == max(per)
        assert s.card.selects_on_test and s.card.selection == "max_over_models_test"
        mass = s.extra["member_weights"]
        assert sum(mass) > 0 and s.values["top1_weighted"] == pytest.approx(
            sum(m * a for m, a in zip(mass, per)) / sum(mass)
        )
    for s, s_max in zip(rec_def.scores, rec_max.scores, strict=True):
        assert not s.card.selects_on_test and s.card.selection != "max_over_models_test"
        per, pick = s.extra["per_member"], s.extra["designated_member"]
        assert per == s_max.extra["per_member"]  # the same cluster models, scored the same way
        assert (
            s.values["top1"] == per[pick]
            and s.values["top1_weighted"] == s_max.values["top1_weighted"]
        )
        mass = s.extra["member_weights"]
        # the largest cluster, ties to the smaller j
        assert mass[pick] == max(mass) and pick == mass.index(max(mass))


def test_presets() -> None:
    """§9.11."""
    a, c = preset("featarc_align_only"), preset("featarc_cluster_only")
    assert (a.num_clusters, a.reg_scale) == (1, 1.0) and (c.num_clusters, c.reg_scale) == (2, 0.0)


@pytest.mark.slow
def test_smoke_logs_assignments_and_reported_cluster(featarc_vs_fedavg) -> None:
    """§9.12: C = 2, 2 rounds, E = 1: finite losses; every round's assignment vector is kept; the
    reported cluster is logged."""
    rec, fin = featarc_vs_fedavg["c2"]
    assert rec.status == "ok"
    hist = fin["extra"]["assign_history"]
    assert hist.shape[0] == 2 and (hist >= 0).sum(1).tolist() == [2, 2]
    for h in fin["history"]:
        assert h["loss"] == h["loss"] and "reported_cluster" in h
    m = make_kit("featarc").method
    from benchmark.contracts.types import ServerState

    j = m.reported_cluster(ServerState(fin["model"], fin["extra"]))
    assert fin["history"][-1]["reported_cluster"] == j


def test_alignment_loss_is_minus_one_at_identical_features_and_its_sign_pulls_together() -> None:
    """§9.5: L_align = −1 when the local outputs equal the targets; +1 when they are opposite (a
    flipped sign would make the regulariser push local features away from the cluster model's)."""
    from methods.featarc import alignment_loss

    t = torch.randn(8, 16, generator=torch.Generator().manual_seed(0))
    assert alignment_loss(t, t.clone(), t) == pytest.approx(-1.0, abs=1e-6)
    assert alignment_loss(-t, -t, t) == pytest.approx(1.0, abs=1e-6)
    p = torch.randn(8, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
    alignment_loss(p, p, t).backward()
    with torch.no_grad():  # one gradient step lowers the loss: it moves p towards t
        assert alignment_loss(p - 0.1 * p.grad, p - 0.1 * p.grad, t) < alignment_loss(p, p, t)


def test_pick_cluster_breaks_exact_ties_to_the_smallest_index() -> None:
    """§2.1 step 4 / §9.4: I = argmin_j A_j, exact ties to the smallest j."""
    from methods.featarc import pick_cluster

    assert pick_cluster(torch.tensor([0.2, -0.5, -0.5], dtype=torch.float64)) == 1
    assert pick_cluster(torch.tensor([-0.7, -0.7], dtype=torch.float64)) == 0
    assert pick_cluster(torch.tensor([0.1, 0.3, -0.2, -0.2], dtype=torch.float64)) == 2


def test_partial_participation_covers_every_registered_client_in_the_per_client_card(
    tmp_path,
) -> None:
    """With p < 1 the client with the highest id may never be sampled: the server still holds an
    assignment (i mod C) and a size (0) for every registered client, so perclient@v1 maps all K
    clients (it failed the cell before)."""
    from benchmark.engine.rounds import server_context
    from benchmark.engine.stages import prepare

    # a quarter of the train split (tests/methods/small_data.py): the per-client card maps clients
    # by the server's assignments, whatever they trained on
    cell = smoke_cell(
        "featarc",
        rounds=1,
        clients=4,
        participation=0.5,
        tasks=["perclient"],
        dataset=SMALL_DIGITS,
    )
    prep = prepare(cell)
    extra = prep.method.init_server(server_context(prep.settings, 0, None)).extra
    assert extra["assign"].tolist() == [0, 1, 0, 1] and extra["n"].tolist() == [0, 0, 0, 0]
    rec = run_cell(cell, tmp_path)
    assert rec.status == "ok" and [s.task for s in rec.scores] == ["perclient"]


def test_step_loss_is_contrastive_plus_lambda_times_alignment(monkeypatch) -> None:
    """Algorithm 2: the local loss is L_SimCLR + λ · L_align, the alignment term added (its sign)
    with weight λ = ``reg_scale`` (its scale). With the contrastive loss fixed to 1 and L_align to
    2, every step's loss is 1 + λ · 2; a subtracted term or a λ that is not read gives another."""
    from methods import featarc

    def const(value: float):
        def loss(*tensors: torch.Tensor) -> torch.Tensor:
            return tensors[0].sum() * 0 + value  # in the graph, so the step can backward

        return loss

    monkeypatch.setitem(featarc.CONTRASTIVE_LOSSES, "ntxent_2b", const(1.0))
    monkeypatch.setattr(featarc, "alignment_loss", const(2.0))
    for lam in (0.25, 3.0):
        kit = make_kit("featarc", clients=2, method_params={"reg_scale": lam})
        m = kit.method
        up, _ = m.client_update(
            m.broadcast(kit.server(), kit.sctx(1)),
            m.init_client(0, kit.server()),
            kit.clients[0],
            kit.ctx(1, 0),
        )
        assert up.metrics["steps"] > 0
        assert up.metrics["loss"] == pytest.approx(1.0 + lam * 2.0), lam


def test_alignment_targets_carry_no_gradient(monkeypatch) -> None:
    """L_align's targets T are constants (Algorithm 2, code ``reg_loss``): ``alignment_loss``
    detaches them, so a target that requires grad gets none; and the targets the client passes
    come from a no-grad forward of the cluster model, so there the detach changes nothing (the
    mutation dropping it is equivalent inside FeatARC, and caught here by the unit half)."""
    from methods import featarc

    p1 = torch.randn(6, 4, requires_grad=True)
    p2 = torch.randn(6, 4, requires_grad=True)
    t = torch.randn(6, 4, requires_grad=True)
    featarc.alignment_loss(p1, p2, t).backward()
    assert t.grad is None and p1.grad is not None and p2.grad is not None

    seen: list[tuple[bool, object]] = []
    real = featarc.alignment_loss

    def spy(a1: torch.Tensor, a2: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        seen.append((targets.requires_grad, targets.grad_fn))
        return real(a1, a2, targets)

    monkeypatch.setattr(featarc, "alignment_loss", spy)
    kit = make_kit("featarc", clients=2)
    m = kit.method
    m.client_update(
        m.broadcast(kit.server(), kit.sctx(1)),
        m.init_client(0, kit.server()),
        kit.clients[0],
        kit.ctx(1, 0),
    )
    assert seen and all(rg is False and fn is None for rg, fn in seen)


def test_each_image_is_aligned_to_its_own_target(monkeypatch) -> None:
    """Algorithm 2: L_align pulls image i's local feature towards *its own* cluster feature T_i.
    ``features`` is replaced by a tag of each image (a function of the pixels only), so the targets
    of a step (``align_target: backbone``, the default) must be the tags of that step's batch, row
    for row; a misaligned regulariser (the targets of another image, e.g. ``targets[idx.flip(0)]``
    or rows in data order) differs (issue 55)."""
    from methods import featarc

    def tag(self, net, tensors, images, view, *, projector=False):
        d = net.encoder(view.normalize(images[:1])).shape[1]
        x = images.flatten(1).double()
        x = x.repeat(1, -(-d // x.shape[1]))[:, :d] + torch.arange(d, dtype=torch.float64)
        return torch.nn.functional.normalize(x, dim=1).float()

    batches: list[torch.Tensor] = []
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
    real_views = featarc.two_views

    def views(batch, *a, **k):
        batches.append(batch.clone())
        return real_views(batch, *a, **k)

    def spy(a1, a2, targets):
        pairs.append((batches[-1], targets.detach().clone()))
        return featarc.alignment_loss.__wrapped__(a1, a2, targets)

    spy.__wrapped__ = featarc.alignment_loss  # type: ignore[attr-defined]
    monkeypatch.setattr(featarc.FeatARC, "features", tag)
    monkeypatch.setattr(featarc, "two_views", views)
    monkeypatch.setattr(featarc, "alignment_loss", spy)
    kit = make_kit("featarc", clients=2, method_params={"batch_size": 16})
    m = kit.method
    net = m.nets.get(torch.device("cpu"))
    view = kit.clients[0].train
    m.client_update(
        m.broadcast(kit.server(), kit.sctx(1)),
        m.init_client(0, kit.server()),
        kit.clients[0],
        kit.ctx(1, 0),
    )
    assert len(pairs) >= 2
    for batch, targets in pairs:
        want = tag(m, net, None, batch, view)
        assert batch.shape[0] > 1 and torch.equal(targets, want)
