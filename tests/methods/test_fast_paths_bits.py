"""The methods' maths rewritten for speed (issue 53) must give the bits of the form they replaced:
Orchestra's Sinkhorn-Knopp calls its kernels directly (the server's clustering runs it on each of
its 500 steps a round) instead of ``(1/K) / (P @ c)`` and ``(1/N) / (Pᵀ @ r)``, on every shape and
stopping rule, with the same ATen calls (the kernel census, ``benchmark.commands.kernel_census``)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from methods.orchestra import global_clustering, sinkhorn_knopp


@torch.no_grad()
def _operator_form(scores: torch.Tensor, *, lam: float, max_iters: int, tol: float) -> torch.Tensor:
    """The loop as the official ``sknopp`` writes it (and this project did before issue 53)."""
    s = scores.detach().float()
    n, k = s.shape
    p = torch.softmax(lam * s, dim=1).t().contiguous()
    r = torch.full((k,), 1.0 / k)
    c = torch.full((n,), 1.0 / n)
    err = math.inf
    for it in range(max_iters):
        r = (1.0 / k) / (p @ c)
        c_new = (1.0 / n) / (p.t() @ r)
        if it % 10 == 0:
            err = float(torch.nan_to_num(c / c_new - 1.0, nan=0.0).abs().sum())
        c = c_new
        if err < tol:
            break
    return (n * c[:, None]) * p.t() * r[None, :]


def test_sinkhorn_is_the_operator_form_bit_for_bit() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(60):
        n = int(torch.randint(2, 160, (1,), generator=g))
        k = int(torch.randint(1, 48, (1,), generator=g))
        s = torch.randn(n, k, generator=g) * float(2 * torch.rand(1, generator=g))
        for max_iters, tol in ((100, 1e-2), (10, 1e-2), (37, 0.0)):
            want = _operator_form(s, lam=25.0, max_iters=max_iters, tol=tol)
            got = sinkhorn_knopp(s, lam=25.0, max_iters=max_iters, tol=tol)
            assert torch.equal(got, want), (n, k, max_iters, tol)


def test_server_clustering_is_unchanged_bit_for_bit(monkeypatch) -> None:
    """Server steps, each through Sinkhorn: the same centroids and loss as with the operator
    form."""
    from methods import orchestra

    g = torch.Generator().manual_seed(1)
    y = F.normalize(torch.randn(80, 32, generator=g), dim=1)
    c0 = F.normalize(torch.randn(32, 32, generator=g), dim=1)
    got = global_clustering(y, c0, steps=60)
    monkeypatch.setattr(orchestra, "sinkhorn_knopp", _operator_form)
    want = orchestra.global_clustering(y, c0, steps=60)
    assert torch.equal(got[0], want[0]) and got[1] == want[1]


def test_sinkhorn_makes_the_same_aten_calls_as_the_operator_form() -> None:
    """The kernel fingerprint (``verify --kernels``) replays the shipped cells' ATen calls: the
    faster loop must call the same operators on the same shapes, so that the fingerprint still
    covers it."""
    from benchmark.commands.kernel_census import Census

    s = torch.randn(40, 8, generator=torch.Generator().manual_seed(2))
    seen = []
    for fn in (_operator_form, sinkhorn_knopp):
        with Census() as census:
            fn(s, lam=25.0, max_iters=30, tol=0.0)
        seen.append(set(census.calls))
    assert seen[0] == seen[1] and seen[0]
