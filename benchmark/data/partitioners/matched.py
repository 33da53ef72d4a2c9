"""``label_matched_test``: per-client test splits that follow each client's train label mix (§3.14).

A project addition, used for per-client evaluation cards (docs/protocols/evaluation.md). Not a
partitioner of the train split, so it is a function, not a registry entry.
"""

from __future__ import annotations

import numpy as np

from benchmark.contracts.data_types import Partition
from benchmark.data.partition import finalize, labels_sha256, substream
from benchmark.data.partitioners._common import class_indices


def label_matched_test(
    partition: Partition, train_labels: np.ndarray, test_labels: np.ndarray, seed: int
) -> Partition:
    """Client k gets t_kc = floor(N_kc / n_c^train * n_c^test) test images of class c (§3.14).

    The test indices of each class are shuffled once (sub-stream (seed, "test")) and handed out as
    consecutive blocks in client order; disjoint, without replacement. n_c^train counts the whole
    train split (dropped indices included), so sum_k t_kc <= n_c^test. Returns a ``Partition`` of
    the test split.
    """
    train_labels = np.asarray(train_labels).astype(np.int64, copy=False)
    test_labels = np.asarray(test_labels).astype(np.int64, copy=False)
    num_classes = int(train_labels.max()) + 1
    if test_labels.size and (test_labels.min() < 0 or test_labels.max() >= num_classes):
        raise ValueError(f"test labels must lie in 0..{num_classes - 1}")
    train_counts = partition.label_counts(train_labels, num_classes)  # K x C
    n_train = np.bincount(train_labels, minlength=num_classes)
    n_test = np.bincount(test_labels, minlength=num_classes)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(n_train > 0, train_counts / n_train, 0.0)
    want = np.floor(share * n_test).astype(np.int64)
    rs = substream(seed, "test")
    per_class = []
    for members in class_indices(test_labels, num_classes) if test_labels.size else []:
        idx = members.copy()
        rs.shuffle(idx)
        per_class.append(idx)
    while len(per_class) < num_classes:  # classes absent from the test split
        per_class.append(np.zeros(0, np.int64))
    starts = np.vstack([np.zeros((1, num_classes), np.int64), np.cumsum(want, axis=0)])
    lists = [
        np.concatenate([per_class[c][starts[k, c] : starts[k + 1, c]] for c in range(num_classes)])
        for k in range(partition.num_clients)
    ]
    spec = {
        "name": "label_matched_test",
        "train_partition_digest": partition.digest(),
        "seed": int(seed),
        "labels_sha256": labels_sha256(test_labels),
    }
    return finalize(
        lists, int(test_labels.size), spec=spec, meta={"tries": 1, "constraint_violated": False}
    )
