"""Server-side aggregation maths (Flower ``aggregate.py`` shape): small, pure, tested alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from benchmark.types import Payload

TensorDict = Mapping[str, torch.Tensor]


def weighted_average(states: Sequence[TensorDict], weights: Sequence[float]) -> dict[str, torch.Tensor]:
    """FedAvg server step (McMahan et al., 2017, Alg. 1): Σ_k (w_k / Σw) · state_k, accumulated in float64.

    Integer tensors (e.g. counters) are taken from the first state. Identical states come back bit-exactly.

    >>> weighted_average([{"w": torch.zeros(2)}, {"w": torch.ones(2)}], [1, 3])["w"]
    tensor([0.7500, 0.7500])
    """
    if not states:
        raise ValueError("weighted_average needs at least one state")
    if len(states) != len(weights):
        raise ValueError("one weight per state")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("weights must sum to a positive number")
    out: dict[str, torch.Tensor] = {}
    for key, first in states[0].items():
        if not first.is_floating_point():
            out[key] = first.clone()
            continue
        if all(torch.equal(s[key], first) for s in states[1:]):
            out[key] = first.clone()  # bit-exact for identical inputs (no rounding through float64 sums)
            continue
        acc = torch.zeros_like(first, dtype=torch.float64)
        for s, w in zip(states, weights):
            acc += (float(w) / total) * s[key].to(torch.float64)
        out[key] = acc.to(first.dtype)
    return out


def aggregation_weights(num_examples: Sequence[int], mode: str, num_batches: Sequence[int] | None = None) -> list[float]:
    """``uniform`` → 1/|M|; ``num_examples`` → n_k/Σn; ``num_batches`` → b_k/Σb (fedavg_simclr.md §2.2)."""
    m = len(num_examples)
    if mode == "uniform":
        return [1.0 / m] * m
    if mode == "num_examples":
        total = float(sum(num_examples))
        return [n / total for n in num_examples]
    if mode == "num_batches":
        if num_batches is None:
            raise ValueError("num_batches weighting needs batch counts")
        total = float(sum(num_batches))
        return [b / total for b in num_batches]
    raise ValueError(f"unknown weighting {mode!r}")


def average_uploads(ups: Mapping[int, Payload], mode: str) -> dict[str, torch.Tensor]:
    """FedAvg of the uploads in client-id order, weighted by :func:`aggregation_weights` of their
    ``num_examples`` under ``mode``: every uploaded tensor (parameters and BN running statistics)."""
    payloads = [ups[k] for k in sorted(ups)]
    weights = aggregation_weights([p.num_examples for p in payloads], mode)
    return weighted_average([p.tensors for p in payloads], weights)
