"""Balanced clustering maths (Orchestra, Lubana et al. ICML 2022; docs/methods/orchestra.md
§2.7-§2.9): pure functions.

- ``sinkhorn_knopp``: the official code's ``sknopp`` (Genevay et al. 2019 style balanced soft
  assignment).
- ``equal_size_kmeans``: the client's local clustering of its projection memory
  (``orchestra.local_clustering``).
- ``global_clustering``: the server's gradient-based centroid learning against SK targets
  (``orchestra.global_clustering``): 500 SGD steps on C with a negative-cosine loss.

No function here touches a global RNG; randomness comes in as an explicit ``torch.Generator``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from benchmark.api import FP32, fp32_math


@fp32_math  # Sinkhorn and cluster logits in fp32 under any autocast (benchmark.core.precision)
@torch.no_grad()
def sinkhorn_knopp(
    scores: torch.Tensor, *, lam: float = 25.0, max_iters: int = 100, tol: float = 1e-2
) -> torch.Tensor:
    """Balanced soft assignment Q (N × K) of N points to K centroids from scores S
    (docs/methods/orchestra.md §2.8).

    P = row-softmax(λS)ᵀ (K × N); alternate r = (1/K)/(P c), c' = (1/N)/(Pᵀ r); every 10 iterations
    err = Σ|c/c' − 1| (NaN terms count 0); stop when err < tol; Q_nk = N c_n P_kn r_k.
    Rows of Q sum to 1; columns sum to ≈ N/K. No gradient flows through it.
    """
    s = scores.detach().float()
    n, k = s.shape
    p = torch.softmax(lam * s, dim=1).t().contiguous()  # K × N
    r = torch.full((k,), 1.0 / k, dtype=s.dtype, device=s.device)
    c = torch.full((n,), 1.0 / n, dtype=s.dtype, device=s.device)
    err = math.inf
    for it in range(max_iters):
        r = (1.0 / k) / (p @ c)
        c_new = (1.0 / n) / (p.t() @ r)
        if it % 10 == 0:
            ratio = torch.nan_to_num(c / c_new - 1.0, nan=0.0)
            err = float(ratio.abs().sum())
        c = c_new
        if err < tol:
            break
    return (n * c[:, None]) * p.t() * r[None, :]


@fp32_math  # Sinkhorn and cluster logits in fp32 under any autocast (benchmark.core.precision)
@torch.no_grad()
def equal_size_kmeans(
    memory: torch.Tensor,
    num_clusters: int,
    generator: torch.Generator,
    *,
    iters: int = 5,
    lam: float = 25.0,
    sk_iters: int = 10,
    tol: float = 1e-2,
) -> torch.Tensor:
    """Orchestra's local clustering (§2.7): N_l unit-norm centroids of the unit-norm rows of
    ``memory``.

    Initialise with N_l distinct random rows; 5 times: Q = SK(Z Uᵀ), hard-assign by argmax, set each
    centroid to the normalised mean of its members, reseeding an empty cluster with a random row.
    Randomness: ``generator`` (CPU).
    """
    z = memory.detach().float()
    m = z.shape[0]
    if m < num_clusters:
        raise ValueError(f"memory has {m} rows, fewer than {num_clusters} clusters")
    init = torch.randperm(m, generator=generator)[:num_clusters].to(z.device)
    u = z[init].clone()
    for _ in range(iters):
        q = sinkhorn_knopp(z @ u.t(), lam=lam, max_iters=sk_iters, tol=tol)
        assign = q.argmax(dim=1)
        for j in range(num_clusters):
            members = assign == j
            if bool(members.any()):
                u[j] = F.normalize(z[members].mean(0), dim=0)
            else:
                u[j] = z[int(torch.randint(m, (1,), generator=generator))]
    return F.normalize(u, dim=1)


@fp32_math  # Sinkhorn and cluster logits in fp32 under any autocast (benchmark.core.precision)
def global_clustering_loss(
    y: torch.Tensor,
    centroids: torch.Tensor,
    *,
    temperature: float,
    lam: float,
    sk_iters: int,
    tol: float,
) -> torch.Tensor:
    """L_glob = −(1/M) Σ_j cos(Q_j, P_j), Q = SK(Y Cᵀ) (no grad), P_j = softmax(⟨normalize(Y_j),
    c⟩/T) (§2.9)."""
    q = sinkhorn_knopp(y @ centroids.detach().t(), lam=lam, max_iters=sk_iters, tol=tol)
    p = torch.softmax(F.normalize(y, dim=1) @ centroids.t() / temperature, dim=1)
    return -F.cosine_similarity(q, p, dim=1).mean()


def global_clustering(
    local_centroids: torch.Tensor,
    init_centroids: torch.Tensor,
    *,
    steps: int = 500,
    lr: float = 0.01,
    momentum: float = 0.9,
    weight_decay: float = 1e-4,
    temperature: float = 0.1,
    lam: float = 25.0,
    sk_iters: int = 100,
    tol: float = 1e-2,
) -> tuple[torch.Tensor, float]:
    """Server clustering of all uploaded local centroids Y (M × d) into N_G centroids, warm-started
    from C (§2.9).

    A fresh SGD(C, lr, momentum, weight decay) runs ``steps`` times: loss
    ``global_clustering_loss``, step, then row-normalise C. Returns (C, last loss); with ``steps =
    0`` C comes back unchanged. Deterministic (no randomness).
    """
    y = local_centroids.detach().float()
    c = init_centroids.detach().float().clone().requires_grad_(True)
    opt = torch.optim.SGD([c], lr=lr, momentum=momentum, weight_decay=weight_decay)
    # server maths stays fp32 in every cell, declared (benchmark.core.precision)
    fp32_steps = FP32.scaler(c.device)
    loss_value = math.nan
    for _ in range(steps):
        with torch.enable_grad():
            loss = global_clustering_loss(
                y, c, temperature=temperature, lam=lam, sk_iters=sk_iters, tol=tol
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
        fp32_steps.step(opt)
        with torch.no_grad():
            c.copy_(F.normalize(c, dim=1))
        loss_value = float(loss.detach())
    return c.detach().clone(), loss_value


@fp32_math  # Sinkhorn and cluster logits in fp32 under any autocast (benchmark.core.precision)
def cluster_assignment_loss(
    z_online: torch.Tensor, z_target: torch.Tensor, centroids: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Orchestra's L_cluster = −(1/B) Σ_i Σ_j p^T_ij log p^O_ij (docs/methods/orchestra.md §2.6 step
    5).

    p = softmax(⟨z, c_j⟩/T) over the global centroids; the target side and the centroids carry no
    gradient; log-softmax (not log of softmax); p^T is a plain temperature softmax, neither balanced
    nor sharpened.
    """
    c = centroids.detach()
    p_target = torch.softmax(z_target.detach() @ c.t() / temperature, dim=1)
    log_p_online = F.log_softmax(z_online @ c.t() / temperature, dim=1)
    return -(p_target * log_p_online).sum(dim=1).mean()


def fifo_push(
    memory: torch.Tensor, rows: torch.Tensor, capacity: int, *, keep: str = "last"
) -> torch.Tensor:
    """Append ``rows`` to ``memory`` (detached) and keep the ``capacity`` most recent
    (``keep="last"``, the FIFO of docs/methods/orchestra.md §2.2) or the first ``capacity`` ever
    pushed (``keep="first"``, the initialisation round)."""
    out = torch.cat([memory, rows.detach().to(memory.dtype)])
    return out[-capacity:] if keep == "last" else out[:capacity]


__all__ = [
    "cluster_assignment_loss",
    "equal_size_kmeans",
    "fifo_push",
    "global_clustering",
    "global_clustering_loss",
    "sinkhorn_knopp",
]
