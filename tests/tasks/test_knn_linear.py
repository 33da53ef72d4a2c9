"""docs/protocols/evaluation.md §7.1-7.2: kNN against brute force and hand-computed scores; the
linear probe's contract."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tasks.probes.knn import knn_predict
from tasks.probes.linear_probe import standardize, train_linear_head


def brute_knn(bank, labels, queries, num_classes, k, t):
    bank = F.normalize(bank, dim=1)
    queries = F.normalize(queries, dim=1)
    preds = []
    for q in queries:
        sims = [(float(q @ b), i) for i, b in enumerate(bank)]
        top = sorted(sims, key=lambda s: (-s[0], s[1]))[:k]
        scores = [0.0] * num_classes
        for s, i in top:
            scores[int(labels[i])] += math.exp(s / t)
        preds.append(max(range(num_classes), key=lambda c: (scores[c], -c)))
    return torch.tensor(preds)


def test_knn_matches_brute_force() -> None:
    g = torch.Generator().manual_seed(0)
    bank, queries = torch.randn(60, 8, generator=g), torch.randn(25, 8, generator=g)
    labels = torch.randint(0, 4, (60,), generator=g)
    assert torch.equal(
        knn_predict(bank, labels, queries, 4, k=5, t=0.1),
        brute_knn(bank, labels, queries, 4, 5, 0.1),
    )


def test_knn_hand_computed_and_ties() -> None:
    bank = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    labels = torch.tensor([1, 0, 0])
    # query at 45 degrees: similarities equal for all three unit vectors -> k=2 takes bank items 0
    # and 1 (lower index wins ties): one vote each for classes 1 and 0, equal weight -> the smaller
    # class index, 0
    q = torch.tensor([[1.0, 1.0]])
    assert knn_predict(bank, labels, q, 2, k=2, t=0.1).item() == 0
    # query along x: items 0 and 2 (s = 1) -> classes 1 and 0 tie; item 1 has s = 0. With k = 3
    # class 0 gets e^10 + e^0 > class 1's e^10
    q = torch.tensor([[1.0, 0.0]])
    assert knn_predict(bank, labels, q, 2, k=3, t=0.1).item() == 0
    assert knn_predict(bank, labels, q, 2, k=1, t=0.1).item() == 1


def test_standardize_uses_train_statistics_only() -> None:
    tr = torch.tensor([[0.0, 10.0], [2.0, 30.0]])
    te = torch.tensor([[100.0, 100.0]])
    a, b = standardize(tr, te)
    assert torch.allclose(a.mean(0), torch.zeros(2), atol=1e-6)
    expected = (te - tr.mean(0)) / (tr.std(0) + 1e-6)
    assert torch.allclose(b, expected)


def test_linear_head_is_deterministic_and_learns() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(200, 5, generator=g)
    y = (x[:, 0] > 0).long()
    h1 = train_linear_head(x, y, 2, epochs=20, batch_size=32, lr=1e-2, weight_decay=0.0, seed=3)
    h2 = train_linear_head(x, y, 2, epochs=20, batch_size=32, lr=1e-2, weight_decay=0.0, seed=3)
    assert torch.equal(h1.weight, h2.weight)
    acc = float((h1(x).argmax(1) == y).float().mean())
    assert acc > 0.9


@pytest.mark.parametrize("task", ["knn", "linear_probe"])
def test_task_reads_test_split_once_and_leaves_encoder_untouched(task: str, tmp_path) -> None:
    from benchmark.api import Encoder, TaskContext, arch_fingerprint
    from benchmark.building_blocks.backbones import ResNetMicro
    from benchmark.contracts.registries import TASKS
    from benchmark.core.config import from_mapping
    from benchmark.data.datasets import load_dataset_splits

    ds = load_dataset_splits("digits", {})
    net = ResNetMicro(width=4).build()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    enc = Encoder(
        module=net,
        feat_dim=32,
        backbone="resnet_micro",
        fingerprint=arch_fingerprint(net),
        input_size=16,
        mean=ds.mean,
        std=ds.std,
    )
    calls = {"n": 0}
    import benchmark.building_blocks.features as feats

    original = feats.extract_features

    def counting(module, split, *a, **k):
        if split is ds.test:
            calls["n"] += 1
        return original(module, split, *a, **k)

    feats.extract_features = counting
    try:
        cls = TASKS.get(task)
        t = cls(from_mapping(cls.Config, {"epochs": 2} if task == "linear_probe" else {}))
        ctx = TaskContext(
            dataset=ds,
            data_root=tmp_path,
            out_dir=tmp_path,
            device=torch.device("cpu"),
            seed=0,
            feature_cache={},
        )
        scores = t.run(enc, ctx)
    finally:
        feats.extract_features = original
    assert calls["n"] == 1
    assert scores.main_metric in scores.values and 0 <= scores.main <= 100
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert scores.card.card_id == t.card().card_id and not scores.card.selects_on_test


def test_knn_queries_never_enter_the_bank() -> None:
    """A transductive kNN (test features added to the bank with their labels) would find each query
    itself: here every bank item is class 0 on one axis and every query class 1 on another, so only
    an inductive kNN scores 0."""
    from tasks.probes.knn import knn_top1

    bank = torch.tensor([[1.0, 0.0]] * 5)
    queries = torch.tensor([[0.0, 1.0], [0.1, 1.0], [0.0, 0.9]])
    assert knn_top1(bank, [0] * 5, queries, [1, 1, 1], 2, k=1, t=0.1) == 0.0


def test_linear_probe_scores_the_test_split_once_after_training(tmp_path) -> None:
    """The probe's head sees the test features exactly once, after its last epoch (a best-epoch
    probe, which the feature-extraction count above cannot tell apart because features are cached,
    would score it every epoch)."""
    from benchmark.api import Encoder, TaskContext, arch_fingerprint
    from benchmark.building_blocks.backbones import ResNetMicro
    from benchmark.contracts.registries import TASKS
    from benchmark.core.config import from_mapping
    from benchmark.data.datasets import load_dataset_splits

    ds = load_dataset_splits("digits", {})
    n_test = len(ds.test.labels)
    net = ResNetMicro(width=4).build()
    enc = Encoder(
        module=net,
        feat_dim=32,
        backbone="resnet_micro",
        fingerprint=arch_fingerprint(net),
        input_size=16,
        mean=ds.mean,
        std=ds.std,
    )
    seen: list[int] = []

    def hook(module, args):
        if isinstance(module, torch.nn.Linear) and args[0].shape[0] == n_test:
            seen.append(n_test)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        cls = TASKS.get("linear_probe")
        t = cls(from_mapping(cls.Config, {"epochs": 3}))
        ctx = TaskContext(
            dataset=ds,
            data_root=tmp_path,
            out_dir=tmp_path,
            device=torch.device("cpu"),
            seed=0,
            feature_cache={},
        )
        t.run(enc, ctx)
    finally:
        handle.remove()
    assert seen == [n_test]
