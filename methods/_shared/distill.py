"""Ensemble similarity distillation maths (FLESD, Shi et al. arXiv 2109.14611; docs/methods/flesd.md
§2.6-§2.8): pure functions.

- ``similarity_matrix``: M = Rᵀ R of unit-norm representations (Eq. 4; rows here are samples, so M =
  R Rᵀ).
- ``topk_sparsify`` / ``topk_payload`` / ``densify_topk``: top-n% of each row kept (self + k'
  others), the rest set to 0 in cosine space, before the exponential (§2.7 step 2, code semantics).
- ``ensemble_similarities``: Ebar = mean_k exp((M_k − 1)/τ_T) (Eq. 5-6, shifted by the constant 1,
  §2.7 step 3).
- ``distill_targets``: p_iu = Ebar[I_i, qidx_u] / Σ_u' Ebar[I_i, qidx_u'] (Eq. 8).
- ``similarity_distill_loss``: KL(p ‖ softmax(qs·Qk/τ_S)) (Eq. 7, 9) and the code's cross-entropy
  form.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from benchmark.api import fp32_math
from benchmark.api import portable_math as pmath


# similarities and distillation targets in fp32 under any autocast (benchmark.core.precision)
@fp32_math
def similarity_matrix(reps: torch.Tensor) -> torch.Tensor:
    """N × N cosine similarities of N representations (rows normalised first). Symmetric, diagonal
    1."""
    r = F.normalize(reps.float(), dim=1)  # fp32: fp32_math casts every float input, float64 too
    return r @ r.t()


def topk_count(percent: float, n: int) -> int:
    """k' = floor(n · N / 100) off-diagonal entries kept per row (docs/methods/flesd.md §2.4)."""
    # DEVIATION: the official code keeps int(n / 100 · N) + 1 entries in all, self included, which
    # float rounding makes one fewer for 98 of 197,109 (n, N) pairs (n = 29, N = 100: 29 against
    # our 30);
    # we keep the exact floor of n % (docs/official-code.md)
    return int(percent * n // 100)


@torch.no_grad()
def topk_payload(sim: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Client-side sparsification: the k largest off-diagonal entries of each row → (values f32,
    indices int32).

    The diagonal is implicit (1.0) and not sent. Ties are broken by ``torch.topk`` (lower index
    first is not guaranteed); ``topk_sparsify`` keeps all threshold ties, so the two agree barring
    ties.
    """
    s = sim.float().clone()
    s.fill_diagonal_(-float("inf"))
    values, indices = torch.topk(s, k, dim=1)
    return values.contiguous(), indices.to(torch.int32).contiguous()


@torch.no_grad()
def densify_topk(values: torch.Tensor, indices: torch.Tensor, n: int) -> torch.Tensor:
    """Server-side: the dense N × N matrix of a top-k payload; dropped entries 0, the diagonal 1."""
    dense = torch.zeros(n, n, dtype=torch.float32, device=values.device)
    dense.scatter_(1, indices.long(), values.float())
    dense.fill_diagonal_(1.0)
    return dense


@torch.no_grad()
def topk_sparsify(sim: torch.Tensor, k: int) -> torch.Tensor:
    """Keep, per row, the self entry and the k largest other entries (ties at the threshold kept);
    zero the rest.

    Code semantics (docs/methods/flesd.md §2.7 step 2, §6 item 8): zeroed in cosine space, so after
    the shifted exponential a dropped entry weighs exp(−1/τ_T), not 0. The result is no longer
    symmetric.
    """
    s = sim.float()
    n = s.shape[0]
    if k >= n - 1:
        return s.clone()
    off = s.clone()
    off.fill_diagonal_(-float("inf"))
    thresh = (
        torch.topk(off, k, dim=1).values[:, -1:]
        if k > 0
        else torch.full((n, 1), float("inf"), device=s.device)
    )
    # DEVIATION: compared exactly; the official code keeps values above thresh - 1e-6 (near-ties)
    keep = off >= thresh
    keep.fill_diagonal_(True)
    return torch.where(keep, s, torch.zeros_like(s))


# similarities and distillation targets in fp32 under any autocast (benchmark.core.precision)
@fp32_math
def ensemble_similarities(sims: Sequence[torch.Tensor], tau_teacher: float) -> torch.Tensor:
    """Ebar = (1/|S|) Σ_k exp((M_k − 1)/τ_T): unweighted, order-free; = mean exp(M_k/τ_T) ·
    exp(−1/τ_T)."""
    if not sims:
        raise ValueError("need at least one similarity matrix")
    acc = torch.zeros_like(sims[0], dtype=sims[0].dtype)
    for m in sims:
        # DEVIATION: the official code (`ensemble_sims`) subtracts each row's maximum, we the
        # constant 1 (Eq. 5-6 up to one global factor). The two agree wherever a row's maximum is
        # its diagonal, 1; they differ on the row of a zero embedding (normalised to 0, so the row
        # is all 0): the official code gives it exp(0) = 1 everywhere, which outweighs every other
        # client's row in the mean, we exp(-1/τ_T), a cosine of 0 as Eq. 5 reads it
        # (docs/official-code.md; tests/methods/_shared/test_distill.py pins it)
        acc = acc + pmath.exp((m - 1.0) / tau_teacher)
    return acc / len(sims)


# similarities and distillation targets in fp32 under any autocast (benchmark.core.precision)
@fp32_math
def distill_targets(ebar: torch.Tensor, rows: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """p_iu = Ebar[I_i, qidx_u] / Σ_u' Ebar[I_i, qidx_u'] (Eq. 8): B' × m, rows sum to 1, scale
    invariant."""
    sub = ebar[rows.long()][:, anchors.long()]
    return sub / sub.sum(dim=1, keepdim=True)


# similarities and distillation targets in fp32 under any autocast (benchmark.core.precision)
@fp32_math
def similarity_distill_loss(
    queries: torch.Tensor, keys: torch.Tensor, targets: torch.Tensor, tau_student: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross-entropy −Σ p log Q, KL(p‖Q)), both averaged over queries (Eq. 7, 9).

    ``queries`` B' × h and ``keys`` (the anchor queue, as rows) m × h are unit-norm; Q =
    softmax(q·k/τ_S). The cross-entropy is what is minimised (same gradient as KL, the code's form);
    the KL is what is logged.
    """
    log_q = F.log_softmax(queries.float() @ keys.float().t() / tau_student, dim=1)
    p = targets.float()
    ce = -(p * log_q).sum(dim=1).mean()
    # p log p, 0 at p = 0: -entr(p), whose log is the C library's per element, not MKL's vector
    # maths (whose bits depend on the CPU's vendor; benchmark.core.portable_math)
    plogp = -torch.special.entr(p)
    kl = (plogp - p * log_q).sum(dim=1).mean()
    return ce, kl


def esd_schedule(
    num_public: int, batch_size: int, queue_size: int, epochs: int, skip_fill: str
) -> int:
    """Optimiser steps of one ESD round (docs/methods/flesd.md §2.8 step 4, §6 item 10); raises on
    an invalid setting.

    Each epoch has floor(N/B') batches (drop_last); the first m/B' batches are skipped every epoch
    (``every_epoch``, the code) or only in epoch 1 (``first_epoch``).
    """
    if queue_size % batch_size != 0:
        raise ValueError(
            f"queue_size m={queue_size} must be a multiple of distill_batch_size B'={batch_size}"
        )
    per_epoch = num_public // batch_size
    fill = queue_size // batch_size
    if skip_fill == "every_epoch":
        if per_epoch <= fill:
            raise ValueError(
                f"ESD would take no step: floor(N/B') = {per_epoch} <= m/B' = {fill} "
                f"(N={num_public}, B'={batch_size}, m={queue_size}); lower queue_size"
            )
        return epochs * (per_epoch - fill)
    if skip_fill == "first_epoch":
        return max(0, epochs * per_epoch - fill)
    raise ValueError(f"unknown skip_fill {skip_fill!r}")


__all__ = [
    "densify_topk",
    "distill_targets",
    "ensemble_similarities",
    "esd_schedule",
    "similarity_distill_loss",
    "similarity_matrix",
    "topk_count",
    "topk_payload",
    "topk_sparsify",
]
