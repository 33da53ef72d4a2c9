"""The partition contract itself (benchmark/data/partition.py; docs/protocols/partitioning.md §1,
§4, §5)."""

from __future__ import annotations

import hashlib
import math
import zlib

import numpy as np
import pytest

from benchmark.contracts.data_types import Partition
from benchmark.data.partition import (
    check_labels,
    finalize,
    labels_sha256,
    partition_stats,
    substream,
)


def manual_digest(clients: list[list[int]], domain: list[int] | None = None) -> str:
    """§5 spelled out: header, K, then (n_k, sorted indices) per client, then the optional domain
    block."""
    h = hashlib.sha256(b"fssl-partition-v1\n")
    h.update(len(clients).to_bytes(8, "little"))
    for ix in clients:
        h.update(len(ix).to_bytes(8, "little"))
        for i in sorted(ix):
            h.update(int(i).to_bytes(8, "little", signed=True))
    if domain is not None:
        h.update(b"domain\n" + bytes(np.asarray(domain, dtype=np.int8).tobytes()))
    return h.hexdigest()


def test_digest_matches_the_spec_and_ignores_construction_order() -> None:
    clients = [[5, 1, 3], [0, 2], []]
    part = finalize([np.array(ix) for ix in clients], 7, spec={})
    assert part.digest() == manual_digest(clients)
    shuffled = finalize(
        [np.array([3, 5, 1]), [2, 0], np.zeros(0, np.int64)], 7, spec={"name": "x"}, meta={"a": 1}
    )
    # spec and meta are not hashed; order of construction is irrelevant
    assert shuffled.digest() == part.digest()
    assert part.dropped.tolist() == [4, 6]
    swapped = finalize([np.array([0, 2]), np.array([1, 3, 5]), np.zeros(0, np.int64)], 7, spec={})
    assert swapped.digest() != part.digest()  # client order is part of the identity


def test_digest_covers_domain() -> None:
    clients = [[0, 1], [2, 3]]
    plain = finalize([np.array(ix) for ix in clients], 4, spec={})
    with_domain = finalize(
        [np.array(ix) for ix in clients], 4, spec={}, domain=np.array([0, 1, 0, 1], np.int8)
    )
    assert with_domain.digest() == manual_digest(clients, [0, 1, 0, 1]) != plain.digest()


def test_finalize_rejects_overlap() -> None:
    with pytest.raises(AssertionError, match="overlapping"):
        finalize([np.array([0, 1]), np.array([1, 2])], 3, spec={"name": "bad"})


def test_stats_on_a_hand_made_partition() -> None:
    labels = np.array([0, 0, 1, 1, 1, 2])
    part = Partition((np.array([0, 1, 2]), np.array([3, 4]), np.zeros(0, np.int64)), np.array([5]))
    stats = partition_stats(part, labels, 3)
    assert stats["counts"] == [[2, 1, 0], [0, 2, 0], [0, 0, 0]]
    assert stats["sizes"] == [3, 2, 0] and stats["size_min"] == 0 and stats["size_max"] == 3
    assert stats["size_mean"] == pytest.approx(5 / 3)
    assert stats["size_std"] == pytest.approx(np.std([3, 2, 0]))
    assert stats["size_cv"] == pytest.approx(np.std([3, 2, 0]) / (5 / 3))
    assert stats["empty_clients"] == 1 and stats["dropped"] == 1
    # client B has entropy 0; empty C is skipped
    h_a = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    assert stats["label_entropy_mean"] == pytest.approx(h_a / 2)
    assert stats["label_entropy_min"] == 0.0
    assert stats["label_entropy_norm_mean"] == pytest.approx(h_a / 2 / math.log2(3))
    assert stats["classes_per_client_any"] == 1.5 and stats["classes_per_client_1pct"] == 1.5
    # q = (2, 3, 0) / 5; emd_A = |2/3 - .4| + |1/3 - .6| = 8/15; emd_B = .4 + .4; emd_C (empty) = 1,
    # weight 0
    assert stats["emd_mean"] == pytest.approx((8 / 15 + 0.8) / 2)
    assert stats["emd_weighted"] == pytest.approx((8 / 15 * 3 + 0.8 * 2) / 5)
    assert stats["tries"] == 1 and stats["constraint_violated"] is False


def test_one_percent_presence_is_inclusive() -> None:
    """Orchestra Table 4 "at least 1 % of the client's samples": >= (reproduces its CIFAR-100
    cell)."""
    labels = np.array([0] * 99 + [1])
    part = Partition((np.arange(100),))
    stats = partition_stats(part, labels, 2)
    assert stats["classes_per_client_any"] == 2 and stats["classes_per_client_1pct"] == 2
    assert stats["emd_mean"] == 0.0 and stats["label_entropy_min"] > 0


def test_substream_definition() -> None:
    word = np.random.SeedSequence([3, zlib.crc32(b"subsample")]).generate_state(1)[0]
    expected = np.random.RandomState(int(word)).random_sample(4)
    assert np.array_equal(substream(3, "subsample").random_sample(4), expected)
    assert not np.array_equal(substream(3, "test").random_sample(4), expected)
    assert not np.array_equal(substream(4, "subsample").random_sample(4), expected)


def test_check_labels_and_labels_sha256() -> None:
    labels, num_classes = check_labels(np.array([2, 0, 1, 1], dtype=np.int32), 2)
    assert labels.dtype == np.int64 and num_classes == 3
    assert (
        labels_sha256(np.array([1, 2], np.int32))
        == hashlib.sha256(np.array([1, 2], "<i8").tobytes()).hexdigest()
    )
    for bad in (
        np.array([0.0, 1.0]),
        np.array([-1, 0]),
        np.zeros((2, 2), np.int64),
        np.array([], np.int64),
    ):
        with pytest.raises(ValueError):
            check_labels(bad, 1)
    with pytest.raises(ValueError, match="no sample"):
        check_labels(np.array([0, 2]), 1)
