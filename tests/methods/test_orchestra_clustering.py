"""Orchestra's clustering maths (docs/methods/orchestra.md §7 items 1-6, 9): Sinkhorn-Knopp, local
and global clustering."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from methods.orchestra import (
    cluster_assignment_loss,
    equal_size_kmeans,
    fifo_push,
    global_clustering,
    global_clustering_loss,
    sinkhorn_knopp,
)


def _blob_scores(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centers = F.normalize(torch.randn(3, 32, generator=g), dim=1)
    counts = [int(128 * 0.8), int(128 * 0.15)]
    counts.append(128 - sum(counts))
    pts = torch.cat([c + 0.1 * torch.randn(n, 32, generator=g) for c, n in zip(centers, counts)])
    cents = F.normalize(torch.randn(8, 32, generator=g), dim=1)
    return F.normalize(pts, dim=1) @ cents.t()


def test_sinkhorn_balance() -> None:
    s = _blob_scores()
    q = sinkhorn_knopp(s, lam=25, max_iters=100, tol=1e-2)
    n, k = s.shape
    assert (q >= 0).all()
    assert torch.allclose(q.sum(1), torch.ones(n), atol=1e-5)
    assert torch.allclose(q.sum(0), torch.full((k,), n / k), rtol=1e-3)
    # the plain softmax is far from balanced on these blobs: the balancing is doing the work
    assert (torch.softmax(25 * s, 1).sum(0) - n / k).abs().max() > 5


def test_sinkhorn_row_shift_invariance() -> None:
    s = _blob_scores(1)
    shift = torch.randn(s.shape[0], 1, generator=torch.Generator().manual_seed(3))
    q1 = sinkhorn_knopp(s, lam=25, max_iters=100)
    q2 = sinkhorn_knopp(s + shift, lam=25, max_iters=100)
    assert torch.allclose(q1, q2, atol=1e-6)
    # only λ·S matters
    assert torch.allclose(sinkhorn_knopp(2 * s, lam=12.5), sinkhorn_knopp(s, lam=25), atol=1e-6)


def test_local_clustering_shape_and_degenerate_memory() -> None:
    g = torch.Generator().manual_seed(0)
    mem = F.normalize(torch.randn(128, 512, generator=g), dim=1)
    u = equal_size_kmeans(mem, 8, g)
    assert u.shape == (8, 512) and torch.isfinite(u).all()
    assert torch.allclose(u.norm(dim=1), torch.ones(8), atol=1e-5)
    same = mem[:1].expand(128, -1).clone()
    u = equal_size_kmeans(same, 8, g)  # every cluster but one empty → reseeded from memory rows
    assert u.shape == (8, 512) and torch.isfinite(u).all()
    assert torch.allclose(u.norm(dim=1), torch.ones(8), atol=1e-5)


def _kmeans_per_cluster_reads(memory, num_clusters, generator, *, iters=5, sk_iters=10):
    """The local k-means as it was written before issue 56 (a boolean mask per cluster, two host
    reads each): the oracle the rewrite must match bit for bit."""
    z = memory.detach().float()
    m = z.shape[0]
    u = z[torch.randperm(m, generator=generator)[:num_clusters]].clone()
    for _ in range(iters):
        assign = sinkhorn_knopp(z @ u.t(), lam=25.0, max_iters=sk_iters, tol=1e-2).argmax(dim=1)
        for j in range(num_clusters):
            members = assign == j
            if bool(members.any()):
                u[j] = F.normalize(z[members].mean(0), dim=0)
            else:
                u[j] = z[int(torch.randint(m, (1,), generator=generator))]
    return F.normalize(u, dim=1)


@pytest.mark.parametrize(
    ("rows", "dim", "clusters", "degenerate"),
    [(128, 512, 8, False), (128, 64, 16, False), (37, 16, 8, False), (128, 32, 8, True)],
)
def test_local_clustering_is_the_per_cluster_loop_bit_for_bit(
    rows: int, dim: int, clusters: int, degenerate: bool
) -> None:
    """Grouping the members by a stable sort (one host read an iteration) gives exactly the
    centroids, and draws exactly the reseeding numbers, of the per-cluster boolean masks."""
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        mem = F.normalize(torch.randn(rows, dim, generator=g), dim=1)
        if degenerate:  # a few distinct rows: most clusters empty, reseeded from the generator
            mem = mem[torch.arange(rows) % 3]
        new_gen, old_gen = (torch.Generator().manual_seed(100 + seed) for _ in range(2))
        new = equal_size_kmeans(mem, clusters, new_gen)
        old = _kmeans_per_cluster_reads(mem, clusters, old_gen)
        assert torch.equal(new, old), (seed, (new - old).abs().max())
        assert torch.equal(new_gen.get_state(), old_gen.get_state())  # the same draws


@pytest.mark.parametrize("clusters", [4, 8, 16])
def test_local_clustering_reads_the_host_twice_an_iteration_whatever_the_clusters(
    clusters: int,
) -> None:
    """On the stand-in accelerator (tests/standin_device.py): one read of the cluster sizes and
    one Sinkhorn tolerance read per iteration (sk_iters 10), none per cluster; the per-update
    figure docs/performance.md states for Orchestra's local clustering."""
    from tests.standin_device import DEVICE, standin_device

    g = torch.Generator().manual_seed(0)
    mem = F.normalize(torch.randn(128, 32, generator=g), dim=1)
    mem = mem[torch.arange(128) % 6]  # some clusters empty: the reseeding path runs too
    for iters in (3, 5):
        with standin_device() as report:
            equal_size_kmeans(mem.to(DEVICE), clusters, g, iters=iters, sk_iters=10)
        assert not report.violations(), report.violations()
        syncs = report.by_site("read", "blocking_copy", "pageable_copy")
        ours = {site: n for site, n in syncs.items() if " at methods/" in site}
        assert sum(ours.values()) == 2 * iters, ours  # (the test's own copy of mem aside)


def _directions(
    n_dir: int, copies: int, seed: int, d: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    dirs = F.normalize(torch.randn(n_dir, d, generator=g), dim=1)
    pts = dirs.repeat_interleave(copies, 0) + 0.02 * torch.randn(n_dir * copies, d, generator=g)
    return dirs, F.normalize(pts, dim=1)


def test_local_clustering_recovers_equal_clusters() -> None:
    for seed in range(50):
        dirs, mem = _directions(8, 16, seed)
        u = equal_size_kmeans(mem, 8, torch.Generator().manual_seed(1000 + seed))
        q = sinkhorn_knopp(mem @ u.t(), lam=25, max_iters=10)
        sizes = torch.bincount(q.argmax(1), minlength=8)
        assert sizes.tolist() == [16] * 8, (seed, sizes)
        cos = u @ dirs.t()
        best = cos.argmax(1)
        assert len(set(best.tolist())) == 8 and (cos.max(1).values > 0.95).all(), seed


def test_global_clustering() -> None:
    _, y = _directions(8, 50, 7)
    c0 = (torch.rand(8, 512, generator=torch.Generator().manual_seed(0)) * 2 - 1) / math.sqrt(512)
    same, _ = global_clustering(y, c0, steps=0)
    assert torch.equal(same, c0)  # warm start: no step, no change
    c, _ = global_clustering(y, c0, steps=500)
    assert torch.allclose(c.norm(dim=1), torch.ones(8), atol=1e-5)
    loss = global_clustering_loss(y, c, temperature=0.1, lam=25, sk_iters=100, tol=1e-2)
    assert float(loss) < -0.99
    assign = (y @ c.t()).argmax(1).view(8, 50)
    assert all(len(set(row.tolist())) == 1 for row in assign)  # one centroid per direction ...
    assert len(set(assign[:, 0].tolist())) == 8  # ... and a bijection, 50 rows each


def test_cluster_loss_values_and_gradients() -> None:
    g = torch.Generator().manual_seed(0)
    zo = F.normalize(torch.randn(6, 16, generator=g), dim=1).requires_grad_(True)
    zt = F.normalize(torch.randn(6, 16, generator=g), dim=1).requires_grad_(True)
    c = F.normalize(torch.randn(5, 16, generator=g), dim=1).requires_grad_(True)
    loss = cluster_assignment_loss(zo, zt, c, 0.1)
    pt = torch.softmax(zt @ c.t() / 0.1, 1)
    po = torch.softmax(zo @ c.t() / 0.1, 1)
    assert abs(float(loss) - float(-(pt * po.log()).sum(1).mean())) < 1e-6
    loss.backward()
    assert c.grad is None and zt.grad is None and zo.grad is not None
    same = cluster_assignment_loss(zt.detach(), zt.detach(), c.detach(), 0.1)
    entropy = -(pt * pt.log()).sum(1).mean()
    assert abs(float(same) - float(entropy)) < 1e-6
    # L_deg is checked on the method's own step (tests/methods/test_orchestra.py), not against torch
    # itself


@pytest.mark.parametrize("steps", [1, 5, 8, 20])
def test_memory_fifo(steps: int) -> None:
    cap, b = 128, 16
    mem = torch.zeros(0, 8)
    pushed = []
    g = torch.Generator().manual_seed(steps)
    for _ in range(steps):
        rows = F.normalize(torch.randn(b, 8, generator=g), dim=1)
        pushed.append(rows)
        mem = fifo_push(mem, rows, cap)
    expect = torch.cat(pushed)[-min(cap, steps * b) :]
    assert torch.equal(mem, expect)
    assert torch.allclose(mem.norm(dim=1), torch.ones(len(mem)), atol=1e-6)
    first = fifo_push(torch.zeros(0, 8), torch.cat(pushed), cap, keep="first")
    assert torch.equal(first, torch.cat(pushed)[:cap])
