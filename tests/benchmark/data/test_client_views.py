"""``ClientViews``: the clients' data built on access from the partition's index (issue 23, P7)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.data.client_views import ClientViews


def _eager(images, shards, labels):
    """The former eager construction (runner.client_datasets before issue 23), as a reference."""
    return [
        (images[torch.as_tensor(ix, dtype=torch.long)], torch.as_tensor(labels[ix]))
        for ix in shards
    ]


def test_each_client_equals_the_eager_build_and_nothing_per_client_is_kept() -> None:
    rng = np.random.default_rng(0)
    images = torch.as_tensor(rng.integers(0, 256, (60, 3, 4, 4)), dtype=torch.uint8)
    labels = rng.integers(0, 3, 60)
    shards = [np.sort(ix) for ix in np.array_split(rng.permutation(60), 7)]
    views = ClientViews(images, shards, (0.5,) * 3, (0.2,) * 3, labels, 3)
    assert len(views) == 7
    for k, (imgs, labs) in enumerate(_eager(images, shards, labels)):
        c = views[k]
        assert c.client_id == k and c.num_examples == len(shards[k]) and c.num_classes == 3
        assert torch.equal(c.train.images, imgs) and torch.equal(c.labels, labs)
        assert c.train.mean == (0.5,) * 3
    assert views[-1].client_id == 6 and [c.client_id for c in views[2:4]] == [2, 3]
    with pytest.raises(IndexError):
        views[7]
    # only the shared image tensor and the index arrays are held
    assert views.images.data_ptr() == images.data_ptr()
    assert all(
        isinstance(v, (torch.Tensor, tuple, np.ndarray, int, type(None)))
        for v in vars(views).values()
    )


def test_unlabelled_clients_carry_no_labels() -> None:
    images = torch.zeros((10, 3, 2, 2), dtype=torch.uint8)
    views = ClientViews(images, [np.arange(5), np.arange(5, 10)], (0.0,) * 3, (1.0,) * 3)
    assert views[1].labels is None and views[1].num_classes == 0
