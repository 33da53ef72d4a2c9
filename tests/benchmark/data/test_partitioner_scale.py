"""Partitioners at cross-device scale (issue 23, P7): faster code, the same output as before, bit
for bit."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.data.partitioners.shards import FedAvgShards


def shards_reference(labels: np.ndarray, num_clients: int, s: int, seed: int) -> list[np.ndarray]:
    """The former loop (a set difference per client), kept here as the reference."""
    rs = np.random.RandomState(seed)
    size = labels.size // (num_clients * s)
    order = np.argsort(labels, kind="stable")
    remaining = np.arange(num_clients * s)
    lists = []
    for _ in range(num_clients):
        chosen = rs.choice(remaining, s, replace=False)
        remaining = np.setdiff1d(remaining, chosen)
        lists.append(np.sort(np.concatenate([order[j * size : (j + 1) * size] for j in chosen])))
    return lists


@pytest.mark.parametrize("s", [1, 2, 3])
def test_fedavg_shards_equals_the_former_loop_at_many_clients(s: int) -> None:
    labels = np.random.default_rng(s).integers(0, 10, 6000)
    part = FedAvgShards(shards_per_client=s)(labels, 700, 3)
    ref = shards_reference(labels, 700, s, 3)
    assert len(part.client_indices) == 700
    assert all(np.array_equal(a, b) for a, b in zip(part.client_indices, ref))
