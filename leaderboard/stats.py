"""Seed statistics, ranks and "within noise" groups (docs/design.md §1.2 Leaderboard). Pure
functions, no I/O.

A leaderboard cell aggregates the seeds of one (method, partition) setting. Its number is the mean
over seeds with the sample standard deviation (ddof = 1) and a two-sided Student-t confidence
interval. Ranks are competition ranks by mean among *complete* cells only; the "within noise" group
1 holds the best cell and every cell whose difference to it is not significant at 95 %, wherever it
ranks: paired over seeds when the two cells share their seeds (the test every other verdict of the
site uses for such a pair, :func:`difference`), Welch's t-test only when their seeds differ.
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


def welch_indistinguishable(
    a: Sequence[float], b: Sequence[float], alpha: float = 1 - CONFIDENCE
) -> bool:
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
    dof = (va + vb) ** 2 / (
        (va**2 / (len(a) - 1) if va else 0) + (vb**2 / (len(b) - 1) if vb else 0)
    )
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


PAIRED = "paired"
WELCH = "Welch"


def noise_test(a_seeds: Sequence[int], b_seeds: Sequence[int], n_a: int, n_b: int) -> str:
    """The test two cells are compared with: :data:`PAIRED` when both have the same distinct seeds
    (one value per seed), :data:`WELCH` otherwise (the condition :func:`difference` pairs on)."""
    same = sorted(a_seeds) == sorted(b_seeds) and len(set(a_seeds)) == len(a_seeds)
    return PAIRED if same and len(a_seeds) == n_a == n_b else WELCH


def indistinguishable(
    a: Sequence[float],
    a_seeds: Sequence[int],
    b: Sequence[float],
    b_seeds: Sequence[int],
    alpha: float = 1 - CONFIDENCE,
) -> tuple[bool, str]:
    """(the data cannot tell ``a`` from ``b`` at level ``alpha``, the test used): the site's one
    rule, :attr:`Difference.within_noise` of :func:`difference` (the interval of ``a − b`` holds 0,
    or is undefined with one value on a side). Paired cells: the Student-t interval of the per-seed
    differences; otherwise Welch's interval, which holds 0 exactly when Welch's test does not
    reject. Every page that states a verdict (track groups, index headlines, compare page,
    summaries) goes through here or :func:`difference`, so one pair never gets two verdicts.

    >>> indistinguishable([80, 81, 82], [0, 1, 2], [79, 80, 81.5], [0, 1, 2])
    (False, 'paired')
    >>> indistinguishable([80, 81, 82], [0, 1, 2], [79, 80, 81.5], [3, 4, 5])
    (True, 'Welch')
    """
    test = noise_test(a_seeds, b_seeds, len(a), len(b))
    d = difference(a, a_seeds, b, b_seeds, 1 - alpha)
    return d.within_noise, test


def noise_groups(
    samples: Sequence[Sequence[float]],
    higher_is_better: bool = True,
    seeds: Sequence[Sequence[int]] | None = None,
) -> list[int]:
    """Group ids (1 = best) over cells, given each cell's per-seed values (and, optionally, the seed
    of each value).

    Group 1 is the best cell (every cell that shares the best mean, when two or more tie) and every
    cell that :func:`indistinguishable` cannot tell from it (paired over seeds when the two share
    their seeds, Welch's test otherwise; without ``seeds``, Welch's test throughout), wherever it
    ranks: a cell ranked below one that is beyond noise of the best is still in group 1 when the
    test cannot tell it from the best. Group 2 is the same rule over the cells left, and so on. No
    group depends on the order of tied cells.

    >>> noise_groups([[80, 81, 79], [79.5, 80.5, 80], [60, 61, 59]])
    [1, 1, 2]
    """
    return [g for g, _ in noise_groups_tested(samples, higher_is_better, seeds)]


def _same(
    samples: Sequence[Sequence[float]],
    seeds: Sequence[Sequence[int]] | None,
    i: int,
    j: int,
) -> tuple[bool, str]:
    if seeds is None:
        return welch_indistinguishable(samples[i], samples[j]), WELCH
    return indistinguishable(samples[i], seeds[i], samples[j], seeds[j])


def noise_groups_tested(
    samples: Sequence[Sequence[float]],
    higher_is_better: bool = True,
    seeds: Sequence[Sequence[int]] | None = None,
) -> list[tuple[int, str]]:
    """:func:`noise_groups` with, per cell, the test that compared it with its group's best cell
    ("" for a best cell; with a tie for best, the test against the first tied cell, in input order,
    that it cannot be told from)."""
    sign = -1.0 if higher_is_better else 1.0
    means = [summarize(s).mean for s in samples]
    left = sorted(range(len(samples)), key=lambda i: (sign * means[i], i))
    out: list[tuple[int, str]] = [(0, "")] * len(samples)
    group = 0
    while left:
        group += 1
        best = [i for i in left if means[i] == means[left[0]]]
        rest = []
        for i in left:
            if i in best:
                out[i] = (group, "")
                continue
            for b in best:
                same, test = _same(samples, seeds, b, i)
                if same:
                    out[i] = (group, test)
                    break
            else:
                rest.append(i)
        left = rest
    return out


@dataclass(frozen=True)
class Difference:
    """``a − b`` of two cells with its interval: ``paired`` over the seeds both have (the Student-t
    interval of the per-seed differences) or, when their seeds differ, Welch's interval of the
    difference of means."""

    delta: float
    ci_low: float  # nan when the interval is undefined (fewer than two values on a side)
    ci_high: float
    paired: bool
    n: int  # the number of seed pairs (paired) or the smaller sample size (Welch)

    @property
    def within_noise(self) -> bool:
        """The interval holds 0 (or is undefined): the data do not tell the two apart at the 95 %
        level."""
        return not (self.ci_low > 0 or self.ci_high < 0)


def difference(
    a: Sequence[float],
    a_seeds: Sequence[int],
    b: Sequence[float],
    b_seeds: Sequence[int],
    confidence: float = CONFIDENCE,
) -> Difference:
    """``mean(a) − mean(b)``, paired by seed when both cells have the same seeds.

    >>> d = difference([3.0, 5.0, 4.0], [0, 1, 2], [1.0, 2.0, 3.0], [0, 1, 2])
    >>> (d.delta, d.paired, d.n)
    (2.0, True, 3)
    """
    if sorted(a_seeds) == sorted(b_seeds) and len(set(a_seeds)) == len(a_seeds) == len(a) == len(b):
        by_seed = dict(zip(b_seeds, b))
        s = summarize([x - by_seed[k] for k, x in zip(a_seeds, a)], confidence)
        return Difference(s.mean, s.ci_low, s.ci_high, True, s.n)
    sa, sb = summarize(a, confidence), summarize(b, confidence)
    delta, nan = sa.mean - sb.mean, float("nan")
    if sa.n < 2 or sb.n < 2:
        return Difference(delta, nan, nan, False, min(sa.n, sb.n))
    va, vb = sa.std**2 / sa.n, sb.std**2 / sb.n
    if va + vb == 0:
        return Difference(delta, delta, delta, False, min(sa.n, sb.n))
    dof = (va + vb) ** 2 / (va**2 / (sa.n - 1) + vb**2 / (sb.n - 1))
    half = float(_st.t.ppf((1 + confidence) / 2, dof)) * math.sqrt(va + vb)
    return Difference(delta, delta - half, delta + half, False, min(sa.n, sb.n))
