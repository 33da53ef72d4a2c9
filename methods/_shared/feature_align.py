"""FeatARC maths (Dec-SSL, Wang et al. ICLR 2023, §5 and Algorithms 1–2; docs/methods/featarc.md
§2–3): small and pure.

D(z1, z2) = −⟨z1, z2⟩ / (‖z1‖ ‖z2‖) everywhere (paper App. C.3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from benchmark.api import weighted_average

TensorDict = Mapping[str, torch.Tensor]


def neg_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise D(a, b) = −cos(a, b)."""
    return -(F.normalize(a.float(), dim=-1) * F.normalize(b.float(), dim=-1)).sum(dim=-1)


def alignment_scores(local: torch.Tensor, clusters: Sequence[torch.Tensor]) -> torch.Tensor:
    """A_j = (1/n) Σ_k D(Zg_j[k], Zl[k]) for each cluster j (Algorithm 1 lines 8–12), float64, shape
    (C,)."""
    return torch.stack([neg_cosine(z, local).double().mean() for z in clusters])


def pick_cluster(scores: torch.Tensor) -> int:
    """I = argmin_j A_j; exact ties go to the smallest j (Algorithm 1 line 14)."""
    best = scores.min()
    return int(torch.nonzero(scores == best)[0, 0])


def alignment_loss(p1: torch.Tensor, p2: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """L_align = ½ mean D(p1, T) + ½ mean D(p2, T), T detached (Algorithm 2; code ``reg_loss``)."""
    t = targets.detach()
    return 0.5 * neg_cosine(p1, t).mean() + 0.5 * neg_cosine(p2, t).mean()


def cluster_average(
    current: Sequence[TensorDict],
    uploads: Sequence[TensorDict],
    assign: Sequence[int],
    weights: Sequence[float],
) -> list[dict[str, torch.Tensor]]:
    """θ_j = Σ_{k∈M_j} w_k θ̃_k / Σ_{k∈M_j} w_k for every cluster j; an empty cluster is returned
    unchanged.

    ``uploads``, ``assign`` and ``weights`` are aligned lists in client-id order
    (docs/methods/featarc.md §2.2, 7.4–7.5).
    """
    out = []
    for j, cur in enumerate(current):
        members = [i for i, a in enumerate(assign) if a == j]
        if not members:
            out.append(dict(cur))
            continue
        out.append(weighted_average([uploads[i] for i in members], [weights[i] for i in members]))
    return out


def largest_cluster(assign: Sequence[int], sizes: Sequence[int], num_clusters: int) -> int:
    """j* = argmax_j m_j, m_j = Σ n_k over clients whose latest assignment is j; ties to the
    smallest j (§3).

    Uses only training-side information (assignments and client sizes), never test data.
    """
    mass = [0] * num_clusters
    for a, n in zip(assign, sizes):
        mass[int(a)] += int(n)
    return max(range(num_clusters), key=lambda j: (mass[j], -j))
