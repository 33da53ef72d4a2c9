"""Property tests of the pure building blocks shared by FedU, FedEMA and FeatARC
(methods/_shared)."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmark.api import build_backbone, divergence
from methods._shared.byol import byol_heads, byol_loss, byol_pair_loss, cosine_round_lr
from methods._shared.ema import (
    autoscaler,
    divergence_tensor_names,
    divergence_weight,
    ema_params_,
    ema_update,
)
from methods.featarc import (
    alignment_loss,
    alignment_scores,
    cluster_average,
    largest_cluster,
    pick_cluster,
)

floats = st.floats(-10, 10, allow_nan=False, width=32)


def tensors(seed: int, shape=(3, 4)) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(*shape, generator=g), "b": torch.randn(5, generator=g)}


# ---- ema.py --------------------------------------------------------------------------------------
@given(st.integers(0, 1000), st.integers(0, 1000))
@settings(max_examples=30, deadline=None)
def test_ema_extremes_are_bitwise(s1: int, s2: int) -> None:
    old, new = tensors(s1), tensors(s2)
    one, zero = ema_update(old, new, 1.0), ema_update(old, new, 0.0)
    for k in old:
        assert torch.equal(one[k], old[k]) and torch.equal(zero[k], new[k])
        assert one[k].data_ptr() != old[k].data_ptr()  # copies, not views


@given(st.integers(0, 1000), st.integers(0, 1000), st.floats(0, 1))
@settings(max_examples=30, deadline=None)
def test_ema_is_the_convex_mix_and_leaves_inputs(s1: int, s2: int, mu: float) -> None:
    old, new = tensors(s1), tensors(s2)
    before = {k: v.clone() for k, v in old.items()}
    out = ema_update(old, new, mu)
    for k in old:
        assert torch.allclose(out[k], mu * old[k] + (1 - mu) * new[k], atol=1e-6)
        assert torch.equal(old[k], before[k])
    assert set(ema_update(old, new, mu, keys=["a"])) == {"a"}


def test_ema_params_in_place() -> None:
    t, o = [torch.ones(3)], [torch.zeros(3)]
    ema_params_(t, o, 0.99)
    assert torch.allclose(t[0], torch.full((3,), 0.99))


@given(st.integers(0, 1000), st.integers(0, 1000))
@settings(max_examples=30, deadline=None)
def test_divergence_is_a_mean_of_norms(s1: int, s2: int) -> None:
    a, b = tensors(s1), tensors(s2)
    d = divergence(a, b, ["a", "b"])
    expected = (float((a["a"] - b["a"]).norm()) + float((a["b"] - b["b"]).norm())) / 2
    assert math.isclose(d, expected, rel_tol=1e-5)
    assert divergence(a, a, ["a", "b"]) == 0.0
    assert math.isclose(divergence(a, b, ["a"]), divergence(b, a, ["a"]))


@given(st.floats(0, 5), st.floats(0.01, 10), st.floats(0.01, 1))
def test_divergence_weight_clips(d: float, lam: float, mu_max: float) -> None:
    mu = divergence_weight(d, lam, mu_max)
    assert 0 <= mu <= mu_max and math.isclose(mu, min(lam * d, mu_max))
    assert divergence_weight(d, math.nan) == 0.0


@given(st.floats(0.05, 1), st.floats(1e-3, 10))
def test_autoscaler_makes_the_first_mu_equal_tau(tau: float, d: float) -> None:
    lam = autoscaler(tau, d)
    assert math.isclose(divergence_weight(d, lam), min(tau, 1.0), rel_tol=1e-9)
    assert math.isnan(autoscaler(tau, 0.0))


def test_divergence_names_by_role() -> None:
    r18, _ = build_backbone("resnet18_cifar", {"width": 4})
    names = divergence_tensor_names(r18)
    assert (
        len(names) == 17
        and all("downsample" not in n for n in names)
        and names[0] == "conv1.weight"
    )
    micro, _ = build_backbone("resnet_micro", {"width": 4})
    assert len(divergence_tensor_names(micro)) == 9  # stem + 4 blocks × 2


# ---- byol.py -------------------------------------------------------------------------------------
@given(st.lists(floats, min_size=4, max_size=4).filter(lambda v: sum(x * x for x in v) > 1e-3))
def test_byol_pair_loss_extremes(v: list[float]) -> None:
    p = torch.tensor([v])
    assert abs(float(byol_pair_loss(p, p))) < 1e-5
    assert abs(float(byol_pair_loss(p, -p)) - 4.0) < 1e-5
    assert abs(float(byol_pair_loss(p, 3 * p))) < 1e-5  # scale invariant


def test_byol_loss_symmetric_and_detaches_targets() -> None:
    g = torch.Generator().manual_seed(0)
    p1, p2, z1, z2 = (torch.randn(8, 5, generator=g, requires_grad=True) for _ in range(4))
    a = byol_loss(p1, p2, z1, z2)
    b = byol_loss(p2, p1, z2, z1)
    assert torch.allclose(a, b)
    a.backward()
    assert z1.grad is None and z2.grad is None and p1.grad is not None


def test_byol_loss_decreases_under_gradient_steps() -> None:
    g = torch.Generator().manual_seed(1)
    p = torch.randn(16, 8, generator=g, requires_grad=True)
    z = torch.randn(16, 8, generator=g)
    opt = torch.optim.SGD([p], lr=0.5)
    first = None
    for _ in range(20):
        loss = byol_loss(p, p, z, z)
        first = float(loss.detach()) if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(byol_loss(p, p, z, z).detach()) < first


def test_heads_shapes_and_names() -> None:
    proj, pred = byol_heads(512, 4096, 2048, 4096)
    assert sum(p.numel() for p in proj.parameters()) == 10_500_096  # docs/methods/fedu.md §2.1
    assert sum(p.numel() for p in pred.parameters()) == 16_791_552
    names = {k for k in pred.state_dict() if not k.endswith("num_batches_tracked")}
    assert names == {
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "1.running_mean",
        "1.running_var",
        "3.weight",
        "3.bias",
    }


@given(st.integers(1, 200), st.integers(1, 200))
def test_cosine_round_lr(r: int, R: int) -> None:
    lr = cosine_round_lr(0.032, r, R)
    assert math.isclose(lr, 0.016 * (1 + math.cos(math.pi * (r - 1) / R)), rel_tol=1e-12)
    assert cosine_round_lr(0.032, 1, R) == 0.032


# ---- feature_align.py ----------------------------------------------------------------------------
def test_alignment_scores_and_ties() -> None:
    zl = torch.eye(3)
    scores = alignment_scores(zl, [-zl, zl, zl])
    assert torch.allclose(scores, torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64))
    assert pick_cluster(scores) == 1  # tie between 1 and 2 → smallest
    assert pick_cluster(torch.zeros(4)) == 0


def test_alignment_loss_minimum_is_minus_one() -> None:
    t = torch.randn(6, 4)
    assert math.isclose(float(alignment_loss(2 * t, t, t)), -1.0, abs_tol=1e-6)


@given(st.permutations(list(range(5))))
def test_cluster_average_members_and_order(perm: list[int]) -> None:
    ups = [{"w": torch.full((2,), float(i))} for i in range(5)]
    assign, w = [0, 1, 0, 1, 0], [1.0, 2.0, 3.0, 4.0, 5.0]
    cur = [
        {"w": torch.full((2,), -1.0)},
        {"w": torch.full((2,), -2.0)},
        {"w": torch.full((2,), -3.0)},
    ]
    out = cluster_average(cur, ups, assign, w)
    assert torch.allclose(out[0]["w"], torch.full((2,), (0 * 1 + 2 * 3 + 4 * 5) / 9))
    assert torch.allclose(out[1]["w"], torch.full((2,), (1 * 2 + 3 * 4) / 6))
    assert torch.equal(out[2]["w"], cur[2]["w"])  # empty cluster unchanged bit-exactly
    permuted = cluster_average(
        cur, [ups[i] for i in perm], [assign[i] for i in perm], [w[i] for i in perm]
    )
    for a, b in zip(out, permuted):
        assert torch.allclose(a["w"], b["w"], atol=1e-6)


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50)), min_size=1, max_size=10))
def test_largest_cluster(pairs: list[tuple[int, int]]) -> None:
    assign, sizes = [a for a, _ in pairs], [n for _, n in pairs]
    j = largest_cluster(assign, sizes, 3)
    mass = [sum(n for a, n in pairs if a == c) for c in range(3)]
    assert mass[j] == max(mass) and j == mass.index(max(mass))
