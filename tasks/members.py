"""Scoring encoders that export several members (``local_ssl``: one per client): one score per
member and the rule that aggregates them. (The cell's feature cache is ``tasks/features.py``.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch

from benchmark.api import Encoder


def modules_of(encoder: Encoder) -> list[torch.nn.Module]:
    return list(encoder.members) if encoder.members else [encoder.module]


Side = TypeVar("Side")


def score_each_member(
    encoder: Encoder, score: Callable[[int], tuple[float, Side]], metric: str
) -> tuple[dict[str, float], dict[str, Any], list[Side]]:
    """``score_members`` for a scoring function that returns (value, side) per member: the values
    and extra of ``score_members`` and every member's side (its other results), in member order."""
    sides: list[Side] = []

    def one(member: int) -> float:
        value, side = score(member)
        sides.append(side)
        return value

    values, extra = score_members(encoder, one, metric)
    return values, extra, sides


def score_members(
    encoder: Encoder, score: Callable[[int], float], metric: str
) -> tuple[dict[str, float], dict]:
    """One score per member. Under the default rule several members report the mean (main value) and
    the minimum, never the maximum (selecting the best client would select on the test set,
    docs/methods/fedavg_simclr.md §3). Under ``member_rule == "max_over_models_test"`` (a
    reproduction mode, docs/methods/featarc.md §3) the maximum is the value and the runner flags the
    score's card as selecting on the test set. Member weights add a weighted mean."""
    n = len(modules_of(encoder))
    scores = [score(i) for i in range(n)]
    if n == 1:
        return {metric: scores[0]}, {}
    rule = getattr(encoder, "member_rule", "mean")
    extra: dict = {"per_member": scores}
    # chosen on the training side (FeatARC's largest cluster): its score is the value
    if rule == "designated":
        pick = int(getattr(encoder, "designated_member", 0))
        values = {metric: float(scores[pick]), f"{metric}_mean": float(np.mean(scores))}
        extra["aggregation"] = (
            f"member {pick}, designated on the training side; every member's score logged"
        )
        extra["designated_member"] = pick
    elif rule == "max_over_models_test":
        values = {
            metric: float(np.max(scores)),
            f"{metric}_mean": float(np.mean(scores)),
            f"{metric}_min": float(np.min(scores)),
        }
        extra["aggregation"] = (
            "max over members (selects on the test set); mean and min also reported"
        )
    else:
        values = {metric: float(np.mean(scores)), f"{metric}_min": float(np.min(scores))}
        extra["aggregation"] = "mean over members; min also reported; max never"
    weights = tuple(getattr(encoder, "member_weights", ()) or ())
    if weights and sum(weights) > 0:
        values[f"{metric}_weighted"] = float(np.average(scores, weights=weights))
        extra["member_weights"] = list(weights)
    return values, extra
