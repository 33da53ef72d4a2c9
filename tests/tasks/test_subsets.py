"""Class-balanced label subsets (docs/protocols/evaluation.md §2.3, §7.3)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.subsets import class_balanced_subset, per_class_count, subset_digest


def _orchestra_reference(
    labels: np.ndarray, fraction: float, seed: int, num_classes: int
) -> np.ndarray:
    """Independent restatement: default_rng(seed), per-class shuffle in ascending class order,
    sorted union."""
    rng = np.random.default_rng(seed)
    m = int(np.ceil(len(labels) * fraction / num_classes - 1e-9))
    out = []
    for c in range(num_classes):
        where = np.where(labels == c)[0].copy()
        rng.shuffle(where)
        out.extend(where[:m].tolist())
    return np.array(sorted(out), dtype=np.int64)


def test_per_class_counts_of_the_spec():
    assert per_class_count(50_000, 0.01, 10) == 50 and per_class_count(50_000, 0.1, 10) == 500
    assert per_class_count(50_000, 0.01, 100) == 5 and per_class_count(50_000, 0.1, 100) == 50
    assert per_class_count(5_000, 0.1, 10) == 50 and per_class_count(5_000, 0.01, 10) == 5
    assert per_class_count(101, 0.1, 10) == 2  # ceil(10.1 / 10)


def test_cifar10_sized_labels_give_500_balanced_images():
    labels = np.repeat(np.arange(10), 5000)
    np.random.default_rng(3).shuffle(labels)
    idx = class_balanced_subset(labels, 0.01, 0)
    assert idx.size == 500 and np.all(np.bincount(labels[idx], minlength=10) == 50)
    assert np.all(np.diff(idx) > 0)  # sorted, no duplicates


def test_matches_the_orchestra_style_reference():
    labels = np.random.default_rng(1).integers(0, 7, size=3000)
    for f in (0.01, 0.1, 0.5):
        np.testing.assert_array_equal(
            class_balanced_subset(labels, f, 0, 7), _orchestra_reference(labels, f, 0, 7)
        )


def test_deterministic_per_seed_and_seed_sensitive():
    labels = np.random.default_rng(2).integers(0, 10, size=2000)
    a, b = class_balanced_subset(labels, 0.1, 0), class_balanced_subset(labels, 0.1, 0)
    assert subset_digest(a) == subset_digest(b)
    assert subset_digest(class_balanced_subset(labels, 0.1, 1)) != subset_digest(a)


def test_small_classes_contribute_all_their_images():
    labels = np.array([0] * 100 + [1] * 3)
    idx = class_balanced_subset(labels, 0.5, 0)  # m = ceil(103 * 0.5 / 2) = 26
    assert np.bincount(labels[idx]).tolist() == [26, 3]


def test_full_fraction_is_everything():
    labels = np.array([1, 0, 1, 2])
    assert class_balanced_subset(labels, 1.0, 5).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        class_balanced_subset(labels, 0.0, 0)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(20, 400),
    c=st.integers(1, 8),
    f=st.sampled_from([0.01, 0.05, 0.1, 0.3]),
    seed=st.integers(0, 9),
)
def test_property_balanced_and_a_function_of_labels_and_seed_only(n, c, f, seed):
    labels = np.random.default_rng(n * 31 + c).integers(0, c, size=n)
    idx = class_balanced_subset(labels, f, seed, c)
    m = per_class_count(n, f, c)
    counts = np.bincount(labels[idx], minlength=c)
    assert np.all(counts == np.minimum(m, np.bincount(labels, minlength=c)))
    # no hidden state
    np.testing.assert_array_equal(idx, class_balanced_subset(labels.copy(), f, seed, c))
