"""``semisup@v1`` (docs/protocols/evaluation.md §3.5): subset recorded, encoder untouched,
deterministic, card fields."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.api import (
    TASKS,
    Encoder,
    Stream,
    TaskContext,
    arch_fingerprint,
    build_backbone,
    from_mapping,
    scoped_torch_seed,
)
from benchmark.data.datasets import load_dataset_splits
from tasks.subsets import class_balanced_subset, subset_digest


def _encoder(seed: int = 0) -> Encoder:
    with scoped_torch_seed(seed, Stream.INIT):
        module, dim = build_backbone("resnet_micro", {"width": 4})
    return Encoder(
        module=module,
        feat_dim=dim,
        backbone="resnet_micro",
        fingerprint=arch_fingerprint(module),
        input_size=16,
        mean=(0.5,) * 3,
        std=(0.25,) * 3,
    )


def _ctx(tmp_path: Path) -> TaskContext:
    return TaskContext(
        dataset=load_dataset_splits("digits"),
        data_root=tmp_path,
        out_dir=tmp_path,
        device=torch.device("cpu"),
        seed=0,
        feature_cache={},
    )


def _task(**params):
    cls = TASKS.get("semi_supervised")
    return cls(from_mapping(cls.Config, {"steps": 12, "batch_size": 16, **params}))


def test_runs_records_subset_and_leaves_encoder_untouched(tmp_path):
    enc = _encoder()
    before = {k: v.clone() for k, v in enc.module.state_dict().items()}
    ctx = _ctx(tmp_path)
    s = _task(label_fraction=0.1, steps=6).run(enc, ctx)
    after = enc.module.state_dict()
    # parameters and BN buffers bit-identical
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert enc.module.training  # mode untouched as well
    idx = class_balanced_subset(ctx.dataset.train.labels, 0.1, 0, 10)
    assert s.extra["subset_digest"] == subset_digest(idx)
    assert s.extra["subset_size"] == idx.size and s.extra["per_class"] == int(
        np.ceil(len(ctx.dataset.train) * 0.1 / 10)
    )
    assert s.extra["test_samples"] == len(ctx.dataset.test)
    assert (
        0.0 <= s.values["top1"] <= 100.0 and s.card.task == "semisup" and not s.card.selects_on_test
    )


def test_two_runs_are_bitwise_equal(tmp_path):
    a = _task(label_fraction=0.1, steps=4).run(_encoder(), _ctx(tmp_path))
    b = _task(label_fraction=0.1, steps=4).run(_encoder(), _ctx(tmp_path))
    assert a.values == b.values and a.extra["final_train_loss"] == b.extra["final_train_loss"]


def test_subset_is_identical_across_encoders(tmp_path):
    """Two different 'methods' (encoders) see the same labelled images: the subset ignores
    everything else."""
    a = _task(label_fraction=0.01, steps=2).run(_encoder(0), _ctx(tmp_path))
    b = _task(label_fraction=0.01, steps=2).run(_encoder(7), _ctx(tmp_path))
    assert a.extra["subset_digest"] == b.extra["subset_digest"]


def test_card_separates_fractions_and_subset_seeds():
    c1, c10 = _task(label_fraction=0.01).card(), _task(label_fraction=0.1).card()
    assert c1.card_id != c10.card_id
    assert _task(subset_seed=1).card().card_id != c1.card_id
    assert c1.settings["selection"] == "final" and c1.name == "semisup@v1"


@pytest.mark.slow
def test_fine_tuning_learns_on_digits(tmp_path):
    """A real (short) fine-tuning beats chance clearly on digits, so the loop really trains."""
    s = _task(label_fraction=0.5, steps=60, batch_size=32, lr=0.05).run(_encoder(), _ctx(tmp_path))
    assert s.values["top1"] > 40.0, s.values


def test_lr_follows_a_per_step_cosine_to_zero(tmp_path, monkeypatch):
    """docs/protocols/evaluation.md §3.5: SGD with a per-step cosine from lr to 0 over the fixed
    step budget, no warm-up: step t (0-based) runs at lr (1 + cos(pi t / T)) / 2. A constant rate
    or a cosine over another horizon differs (issue 55: dropping the schedule passed the module)."""
    seen: list[float] = []
    real = torch.optim.SGD.step

    def step(self, *a, **k):
        seen.append(self.param_groups[0]["lr"])
        return real(self, *a, **k)

    monkeypatch.setattr(torch.optim.SGD, "step", step)
    steps, lr = 5, 0.04
    _task(label_fraction=0.1, steps=steps, lr=lr).run(_encoder(), _ctx(tmp_path))
    want = [lr * (1 + np.cos(np.pi * t / steps)) / 2 for t in range(steps)]
    assert seen == pytest.approx(want, rel=1e-9, abs=1e-12)
