"""Seed statistics, ranks and "within noise" groups (docs/design.md §1.2 Leaderboard). Pure functions, no I/O.

A leaderboard cell aggregates the seeds of one (method, partition) setting. Its number is the mean over seeds with
the sample standard deviation (ddof = 1) and a two-sided Student-t confidence interval. Ranks are competition ranks
by mean among *complete* cells only; "within noise" groups chain cells whose difference to the group's leader is
not significant under Welch's t-test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as _st

CONFIDENCE = 0.95


@dataclass(frozen=True)
class SeedSummary:
    n: int
    mean: float
    std: float  # sample std (ddof=1); nan for n < 2
    ci_low: float  # t-interval; nan for n < 2
    ci_high: float

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2


def summarize(values: Sequence[float], confidence: float = CONFIDENCE) -> SeedSummary:
    """Mean, sample std and the Student-t interval ``mean ± t_{n-1, (1+c)/2} · std / √n``.

    >>> s = summarize([1.0, 2.0, 3.0]); (s.mean, s.std, round(s.half_width, 4))
    (2.0, 1.0, 2.4841)
    """
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        nan = float("nan")
        return SeedSummary(0, nan, nan, nan, nan)
    mean = math.fsum(xs) / n
    if n < 2:
        nan = float("nan")
        return SeedSummary(1, mean, nan, nan, nan)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(_st.t.ppf((1 + confidence) / 2, n - 1)) * std / math.sqrt(n)
    return SeedSummary(n, mean, std, mean - half, mean + half)


def welch_indistinguishable(a: Sequence[float], b: Sequence[float], alpha: float = 1 - CONFIDENCE) -> bool:
    """True when Welch's two-sided t-test does not reject equal means at level ``alpha``.

    Identical constant samples are indistinguishable; distinct constant samples are distinguishable.
    """
    a, b = [float(x) for x in a], [float(x) for x in b]
    if len(a) < 2 or len(b) < 2:
        return False
    sa, sb = summarize(a), summarize(b)
    va, vb = sa.std**2 / len(a), sb.std**2 / len(b)
    if va + vb == 0:
        return sa.mean == sb.mean
    t = (sa.mean - sb.mean) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / ((va**2 / (len(a) - 1) if va else 0) + (vb**2 / (len(b) - 1) if vb else 0))
    p = 2 * float(_st.t.sf(abs(t), dof))
    return p >= alpha


def competition_ranks(means: Sequence[float], higher_is_better: bool = True) -> list[int]:
    """1 + the number of strictly better means ("1224" ranking); equal means share a rank.

    >>> competition_ranks([70.0, 80.0, 70.0, 60.0])
    [2, 1, 2, 4]
    """
    sign = -1.0 if higher_is_better else 1.0
    keys = [sign * m for m in means]
    return [1 + sum(1 for other in keys if other < k) for k in keys]


def noise_groups(samples: Sequence[Sequence[float]], higher_is_better: bool = True) -> list[int]:
    """Group ids (1 = best) over cells, given each cell's per-seed values.

    Cells are visited from best to worst mean; a group's leader is its first cell, and a later cell joins the current
    group while Welch's test cannot tell it apart from the leader; otherwise it starts the next group.

    >>> noise_groups([[80, 81, 79], [79.5, 80.5, 80], [60, 61, 59]])
    [1, 1, 2]
    """
    sign = -1.0 if higher_is_better else 1.0
    means = [summarize(s).mean for s in samples]
    order = sorted(range(len(samples)), key=lambda i: (sign * means[i], i))
    groups = [0] * len(samples)
    group, leader = 0, None
    for i in order:
        if leader is None or not welch_indistinguishable(samples[leader], samples[i]):
            group, leader = group + 1, i
        groups[i] = group
    return groups
