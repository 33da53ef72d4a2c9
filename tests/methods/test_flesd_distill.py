"""FLESD's similarity and distillation maths (docs/methods/flesd.md §7 items 1-3, 7, 8)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from methods.flesd import (
    densify_topk,
    distill_targets,
    ensemble_similarities,
    esd_schedule,
    similarity_distill_loss,
    similarity_matrix,
    topk_count,
    topk_payload,
    topk_sparsify,
)


def _sims(n: int, k: int, seed: int = 0, dtype=torch.float32) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [similarity_matrix(torch.randn(n, 16, generator=g, dtype=dtype)) for _ in range(k)]


def test_similarity_matrix() -> None:
    # unit columns
    r = F.normalize(torch.randn(128, 64, generator=torch.Generator().manual_seed(0)), dim=0)
    m = similarity_matrix(r.t())
    assert torch.allclose(m, m.t(), atol=1e-6)
    assert torch.allclose(m.diagonal(), torch.ones(64), atol=1e-5)
    assert m.min() >= -1 - 1e-6 and m.max() <= 1 + 1e-6


def test_ensemble_is_mean_of_sharpened() -> None:
    sims = _sims(64, 3, dtype=torch.float64)
    tau = 0.1
    ebar = ensemble_similarities(sims, tau)
    ref = sum(torch.exp(m / tau) for m in sims) / 3
    assert torch.allclose(ebar * math.exp(1 / tau), ref, rtol=1e-6)
    # order-free, no sizes
    assert torch.allclose(ensemble_similarities(sims[::-1], tau), ebar, rtol=1e-6)
    cold = ensemble_similarities(_sims(64, 3), 0.01)
    assert torch.isfinite(cold).all()
    # the shift is needed
    assert not torch.isfinite(sum(torch.exp(m / 0.01) for m in _sims(64, 3))).all()


def test_targets_normalised_and_scale_invariant() -> None:
    ebar = ensemble_similarities(_sims(50, 2), 0.1)
    rows = torch.tensor([0, 3, 7, 9])
    anchors = torch.randint(0, 50, (32,), generator=torch.Generator().manual_seed(1))
    p = distill_targets(ebar, rows, anchors)
    assert p.shape == (4, 32)
    assert torch.allclose(p.sum(1), torch.ones(4), atol=1e-6)
    assert torch.allclose(distill_targets(ebar * 123.0, rows, anchors), p, atol=1e-6)


def test_distill_loss_minimal_at_targets() -> None:
    g = torch.Generator().manual_seed(0)
    keys = F.normalize(torch.randn(40, 8, generator=g), dim=1)
    queries = keys[:5]
    tau = 0.1
    p = torch.softmax(queries @ keys.t() / tau, dim=1)  # student similarities equal the targets
    ce, kl = similarity_distill_loss(queries, keys, p, tau)
    entropy = -(p * p.log()).sum(1).mean()
    assert float(kl) <= 1e-6 and abs(float(ce) - float(entropy)) < 1e-5
    other = F.normalize(torch.randn(5, 8, generator=g), dim=1)
    _, kl_other = similarity_distill_loss(other, keys, p, tau)
    assert float(kl_other) > 1e-3
    # gradient descent on the queries lowers the KL
    q = other.clone().requires_grad_(True)
    opt = torch.optim.SGD([q], lr=0.05)
    for _ in range(50):
        ce, kl = similarity_distill_loss(F.normalize(q, dim=1), keys, p, tau)
        opt.zero_grad()
        ce.backward()
        opt.step()
    assert float(kl) < float(kl_other)


def test_step_count() -> None:
    assert esd_schedule(640, 128, 256, 3, "every_epoch") == 9
    assert esd_schedule(640, 128, 256, 3, "first_epoch") == 13
    with pytest.raises(ValueError, match="no step"):
        esd_schedule(300, 128, 256, 3, "every_epoch")
    with pytest.raises(ValueError, match="multiple"):
        esd_schedule(640, 128, 200, 3, "every_epoch")


def test_topk_sparsification() -> None:
    n, pct, tau = 100, 10, 0.1
    k = topk_count(pct, n)
    assert k == 10
    m = _sims(n, 1, seed=3)[0]
    sparse = topk_sparsify(m, k)
    assert ((sparse != 0).sum(1) == k + 1).all()  # self + 10 (no ties with continuous data)
    assert torch.equal(sparse.diagonal(), m.diagonal())
    ebar = ensemble_similarities([sparse], tau)
    dropped = sparse == 0
    assert torch.allclose(
        ebar[dropped], torch.full_like(ebar[dropped], math.exp(-1 / tau)), atol=1e-7
    )
    values, indices = topk_payload(m, k)
    assert values.shape == (100, 10) and values.dtype == torch.float32
    assert indices.shape == (100, 10) and indices.dtype == torch.int32
    dense = densify_topk(values, indices, n)
    kept = sparse.clone()
    kept.fill_diagonal_(1.0)  # the diagonal is implicit (1.0) in the payload
    assert torch.equal(dense, kept)


def test_topk_floor_count_and_exact_ties() -> None:
    """Our top-n% (docs/official-code.md, FLESD): floor(p·N/100) other entries plus self, threshold
    compared exactly. The official code keeps int(p/100·N) + 1 entries in all (p = 29, N = 100:
    28.999... → 29 in all, one fewer than ours) and every value above thresh − 1e-6 (near-ties)."""
    n, pct = 100, 29
    # ours: 29 others + self; the official count: 29 in all
    assert topk_count(pct, n) == 29 and int(pct / 100 * n) + 1 == 29
    m = _sims(n, 1, seed=5)[0]
    assert ((topk_sparsify(m, topk_count(pct, n)) != 0).sum(1) == 30).all()
    row = torch.tensor([1.0, 0.9, 0.5, 0.5 - 5e-7, 0.1])
    sim = torch.eye(5)
    sim[0] = row
    kept = topk_sparsify(sim, 2)[0]
    # the near-tie 0.5 − 5e-7 is dropped
    assert kept.tolist() == pytest.approx([1.0, 0.9, 0.5, 0.0, 0.0])


def test_similarity_matrix_is_fp32_whatever_the_input() -> None:
    """fp32_math casts every floating input: float64 representations give a float32 matrix."""
    reps = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    sim = similarity_matrix(reps)
    assert sim.dtype == torch.float32
    torch.testing.assert_close(sim, similarity_matrix(reps.float()), rtol=0, atol=0)


def _official_ensemble(sims: list[torch.Tensor], tau: float) -> torch.Tensor:
    """A transcription of the official ``ensemble_sims`` (github.com/WOWNICE/FLESD
    ``global_aggregate.py``, dense case): each client's matrix minus its row maxima, then exp(·/τ),
    then the mean."""
    return sum(torch.exp((m - m.max(dim=1, keepdim=True).values) / tau) for m in sims) / len(sims)


def test_a_zero_embedding_row_is_a_cosine_of_zero_not_a_row_of_ones() -> None:
    """docs/official-code.md, FLESD: we subtract the constant 1 (Eq. 5-6 up to one global factor),
    the official code each row's maximum. On a zero embedding's row (normalised to 0: the row is all
    0, its maximum 0) the official code gives that client exp(0) = 1 everywhere; we give it
    exp(-1/τ_T), the weight of a cosine of 0."""
    tau = 0.1
    g = torch.Generator().manual_seed(3)
    reps = [torch.randn(6, 8, generator=g, dtype=torch.float64) for _ in range(2)]
    reps[0][0] = 0.0  # client 0 embeds image 0 as the zero vector
    sims = [similarity_matrix(r).double() for r in reps]
    assert torch.equal(sims[0][0], torch.zeros(6, dtype=torch.float64))
    ebar = ensemble_similarities(sims, tau)
    # ours is Eq. 5-6 exactly (mean of exp(M_k / τ_T)), on the degenerate row as everywhere
    eq6 = sum(torch.exp(m / tau) for m in sims) / 2
    assert torch.allclose(ebar * math.exp(1 / tau), eq6, rtol=1e-9)
    rows, anchors = torch.tensor([0, 1]), torch.arange(6)
    ours = distill_targets(ebar, rows, anchors)
    official = distill_targets(_official_ensemble(sims, tau), rows, anchors)
    # every other row agrees with the official code; row 0 does not
    assert torch.allclose(ours[1], official[1], atol=1e-6)
    assert (ours[0] - official[0]).abs().max() > 0.1
    # under the official code client 0's row of ones swamps client 1's: image 0's target is almost
    # uniform; ours keeps client 1's structure
    uniform = torch.full((6,), 1 / 6)
    assert (official[0] - uniform).abs().max() < (ours[0] - uniform).abs().max()
