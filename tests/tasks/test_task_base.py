"""The tasks' run skeleton (tasks/task_base.py): a probe on frozen features is its scoring function
and its card; several members are aggregated by ``score_members`` and side metrics averaged; and
every built-in task but detection uses it."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import torch
from torch import nn

from benchmark.api import (
    DatasetSplit,
    DatasetSplits,
    Encoder,
    ProtocolCard,
    Task,
    TaskContext,
    arch_fingerprint,
)
from benchmark.contracts.registries import TASKS, load_builtins
from tasks.subsets import class_balanced_subset, per_class_count, subset_digest, subset_record
from tasks.task_base import FeatureProbe, TaskBase

load_builtins()
MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


class Flat(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) * self.scale


class MeanProbe(FeatureProbe):
    """A toy probe: the main value is the mean test feature, its side metric the train one."""

    name: ClassVar[str] = "mean_probe"
    Config: ClassVar[type] = dict

    def card(self) -> ProtocolCard:
        return ProtocolCard(
            task="mean_probe", version="1", settings={"selection": "final"}, name="mean_probe@v1"
        )

    def score_features(self, train_f, test_f, ctx):
        return float(test_f.mean()), {"train_mean": float(train_f.mean())}


def toy_ctx(tmp_path) -> TaskContext:
    g = torch.Generator().manual_seed(0)
    split = DatasetSplit(
        torch.randint(0, 256, (6, 3, 2, 2), generator=g, dtype=torch.uint8),
        np.arange(6) % 2,
        2,
    )
    ds = DatasetSplits("toy", split, split.subset(np.arange(4)), "toy", MEAN, STD)
    return TaskContext(
        dataset=ds,
        data_root=tmp_path,
        out_dir=tmp_path,
        device=torch.device("cpu"),
        seed=0,
        feature_cache={},
    )


def toy_encoder(*scales: float) -> Encoder:
    nets = [Flat(s) for s in scales]
    return Encoder(
        module=nets[0],
        members=tuple(nets) if len(nets) > 1 else (),
        feat_dim=12,
        backbone="flat",
        fingerprint=arch_fingerprint(nets[0]),
        input_size=2,
        mean=MEAN,
        std=STD,
    )


def test_a_feature_probe_is_its_scoring_function_and_its_card(tmp_path) -> None:
    probe = MeanProbe({})
    assert isinstance(probe, Task)
    ctx, enc = toy_ctx(tmp_path), toy_encoder(1.0)
    s = probe.run(enc, ctx)
    assert s.task == "mean_probe" and s.card == probe.card()
    assert s.main_metric == "top1" and s.higher_is_better and s.extra == {}
    assert list(s.values) == ["top1", "train_mean"] and s.wall_time_s >= 0
    # the features came through the cell's cache: a second run extracts nothing
    cached = dict(ctx.feature_cache)
    assert probe.run(enc, ctx).values == s.values
    assert len(cached) == 2 and all(ctx.feature_cache[k] is v for k, v in cached.items())


def test_members_are_aggregated_and_side_metrics_averaged(tmp_path) -> None:
    ctx = toy_ctx(tmp_path)
    one = [MeanProbe({}).run(toy_encoder(s), toy_ctx(tmp_path)).values for s in (1.0, 3.0)]
    s = MeanProbe({}).run(toy_encoder(1.0, 3.0), ctx)
    mains = [v["top1"] for v in one]
    assert s.values["top1"] == pytest.approx(np.mean(mains))
    assert s.values["top1_min"] == pytest.approx(min(mains))
    assert s.values["train_mean"] == pytest.approx(np.mean([v["train_mean"] for v in one]))
    assert s.extra["per_member"] == pytest.approx(mains) and "aggregation" in s.extra


def test_subset_record() -> None:
    labels = np.arange(40) % 4
    idx = class_balanced_subset(labels, 0.5, 0, 4)
    rec = subset_record(labels, idx, 0.5, 4)
    assert rec == {
        "subset_digest": subset_digest(idx),
        "subset_size": 20,
        "per_class": per_class_count(40, 0.5, 4),
        "per_class_min": 5,
        "per_class_max": 5,
    }
    assert subset_record(labels, np.arange(40), 1.0, 4)["per_class"] is None


def test_every_built_in_task_but_detection_runs_on_the_skeleton() -> None:
    on_base = {name for name in TASKS.names() if issubclass(TASKS.get(name), TaskBase)}
    assert set(TASKS.names()) - on_base == {"coco_detection"}
    assert {n for n in on_base if issubclass(TASKS.get(n), FeatureProbe)} == {"knn", "linear_probe"}
