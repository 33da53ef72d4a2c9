"""Dec-SSL's IID cells keep the first 80 % of each client's list (train_val_test), as its non-IID
ones do."""

from __future__ import annotations

import numpy as np

from benchmark.contracts.registries import PARTITIONERS, load_builtins
from benchmark.core.config import from_mapping


def test_iid_with_decssl_prefix_keeps_a_random_80_percent_of_each_client() -> None:
    load_builtins()
    labels = np.repeat(np.arange(10), 100)
    full = from_mapping(PARTITIONERS.get("iid"), {})(labels, 5, seed=0)
    cut = from_mapping(
        PARTITIONERS.get("iid"), {"modifiers": [{"name": "decssl_prefix", "fraction": 0.8}]}
    )(labels, 5, seed=0)
    for a, b in zip(full.client_indices, cut.client_indices, strict=True):
        assert len(b) == int(0.8 * len(a)) and set(b) <= set(a)
        # a random subset, not the lowest indices
        assert not np.array_equal(np.sort(b), np.sort(a)[: len(b)])
    assert len(cut.dropped) == sum(len(a) for a in full.client_indices) - sum(
        len(b) for b in cut.client_indices
    )
