"""The run skeleton the built-in tasks share, as lm-eval's ``Task`` and MTEB's abstract tasks share
theirs: :class:`TaskBase` times a task's ``score`` and returns its values bound to its card, and
:class:`FeatureProbe` is a probe on the frozen features of the cell's data, member by member, so
that a new probe is its scoring function (``score_features``) and its card (``card``).

Both satisfy the ``Task`` protocol (``benchmark.api.Task``, benchmark/contracts/task.py); a task
that does not fit them (``coco_detection``: its card depends on what it read) implements the
protocol itself.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import torch

from benchmark.api import Encoder, ProtocolCard, TaskContext, TaskScores, encoder_features
from tasks.members import score_each_member

# what ``score`` returns: the values (the main metric among them) and the task's extra record
Scored = tuple[dict[str, float], dict[str, Any]]


class TaskBase:
    """A task whose ``run`` is: time ``score``, then bind its values to ``card()``. Subclasses set
    ``name`` and ``Config`` (and ``version``, ``main_metric``, ``higher_is_better`` where they
    differ from the defaults) and write ``card`` and ``score``."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    main_metric: ClassVar[str] = "top1"
    higher_is_better: ClassVar[bool] = True
    Config: ClassVar[type]
    # False when ``score`` reads neither ``ctx.partition`` nor ``ctx.partition_seed``: a run then
    # scores the cells of a partition-free method once and shares the score across partitions
    # (benchmark.engine.sharing). True (the safe default) for a task that does not say
    reads_partition: ClassVar[bool] = True

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    def card(self) -> ProtocolCard:
        raise NotImplementedError

    def score(self, encoder: Encoder, ctx: TaskContext) -> Scored:
        """(values, extra) of ``encoder`` in ``ctx``."""
        raise NotImplementedError

    def run(self, encoder: Encoder, ctx: TaskContext) -> TaskScores:
        t0 = time.perf_counter()
        values, extra = self.score(encoder, ctx)
        return TaskScores(
            task=self.name,
            card=self.card(),
            main_metric=self.main_metric,
            higher_is_better=self.higher_is_better,
            values=values,
            wall_time_s=time.perf_counter() - t0,
            extra=extra,
        )


class FeatureProbe(TaskBase):
    """A probe on frozen features: ``score_features`` scores one member's (train, test) features of
    the cell's data (``encoder_features``: extracted once per cell, shared by every such task) and
    returns its main value and any side metrics. Several members (``local_ssl``) are aggregated by
    ``tasks.members.score_members`` (the main metric) and each side metric is their mean."""

    def score_features(
        self, train_f: torch.Tensor, test_f: torch.Tensor, ctx: TaskContext
    ) -> tuple[float, dict[str, float]]:
        """(main value, side metrics) of one member's features; ``ctx.dataset`` holds the labels."""
        raise NotImplementedError

    def score(self, encoder: Encoder, ctx: TaskContext) -> Scored:
        def one(member: int) -> tuple[float, dict[str, float]]:
            train_f, test_f = encoder_features(encoder, ctx, member)
            return self.score_features(train_f, test_f, ctx)

        values, extra, sides = score_each_member(encoder, one, self.main_metric)
        for key in sides[0]:
            values[key] = float(sum(side[key] for side in sides) / len(sides))
        return values, extra


__all__ = ["FeatureProbe", "Scored", "TaskBase"]
