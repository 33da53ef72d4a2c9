"""eval_split: validation — hyperparameters are chosen on a part of the train split; the test split
is never read."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.data.datasets import hold_out_validation, load_dataset_splits


def _rows(split) -> set[bytes]:
    return {
        img.numpy().tobytes() + bytes([int(y)])
        for img, y in zip(split.images, split.labels, strict=True)
    }


def test_validation_is_carved_from_train_and_never_touches_test():
    full = load_dataset_splits("digits", {})
    val = load_dataset_splits("digits", {"eval_split": "validation"})
    # the validation view's train + evaluation splits are exactly the full train split, disjoint
    assert len(val.train) + len(val.test) == len(full.train)
    assert _rows(val.train) | _rows(val.test) == _rows(full.train)
    assert not _rows(val.test) & _rows(full.test)
    assert not _rows(val.train) & _rows(full.test)
    # class-stratified: every class keeps ~20 % of its train images for validation
    tr_counts = np.bincount(full.train.labels, minlength=10)
    va_counts = np.bincount(val.test.labels, minlength=10)
    assert np.all(np.abs(va_counts - np.round(0.2 * tr_counts)) <= 0)
    # a different view has a different revision (records of the two never share a data digest); same
    # statistics
    assert val.revision != full.revision
    assert val.mean == full.mean and val.std == full.std


def test_validation_carve_is_deterministic_and_fraction_is_a_parameter():
    a = load_dataset_splits("digits", {"eval_split": "validation"})
    b = load_dataset_splits("digits", {"eval_split": "validation"})
    assert np.array_equal(a.test.labels, b.test.labels) and bool(
        (a.test.images == b.test.images).all()
    )
    c = load_dataset_splits("digits", {"eval_split": "validation", "val_fraction": 0.1})
    assert len(c.test) < len(a.test) and c.revision != a.revision


def test_validation_rejects_bad_fraction_and_unknown_split():
    full = load_dataset_splits("digits", {})
    with pytest.raises(ValueError, match="val_fraction"):
        hold_out_validation(full, 1.0)
    with pytest.raises(Exception, match="eval_split"):
        load_dataset_splits("digits", {"eval_split": "train"})


def test_the_embedded_default_split_is_pinned():
    """Records of the default compare across commits only if its train/test split never moves: its
    content digest is fixed here (and the validation carve's, which the quickstart_tune selection
    was made on)."""
    assert load_dataset_splits("digits", {}).revision == "7b984769c5035367"
    assert (
        load_dataset_splits("digits", {"eval_split": "validation"}).revision == "172d34b87236aaf6"
    )
