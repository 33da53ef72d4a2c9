"""Seed statistics, ranks and noise groups: golden values (leaderboard/stats.py)."""

from __future__ import annotations

import math

import pytest

from leaderboard import stats


def test_summarize_golden_t_interval() -> None:
    s = stats.summarize([60.0, 62.0, 64.0])
    assert (s.n, s.mean, s.std) == (3, 62.0, 2.0)
    # t_{0.975, 2} = 4.302652729749464; half width = t * 2 / sqrt(3)
    assert s.half_width == pytest.approx(4.302652729749464 * 2 / math.sqrt(3), rel=1e-9)
    assert (s.ci_low, s.ci_high) == pytest.approx((57.0317246, 66.9682754), abs=1e-6)


def test_summarize_small_samples_have_no_spread() -> None:
    one = stats.summarize([70.0])
    assert one.n == 1 and one.mean == 70.0 and math.isnan(one.std) and math.isnan(one.ci_low)
    assert stats.summarize([]).n == 0


def test_competition_ranks_share_ties_and_respect_direction() -> None:
    assert stats.competition_ranks([70.0, 80.0, 70.0, 60.0]) == [2, 1, 2, 4]
    assert stats.competition_ranks([0.3, 0.1, 0.2], higher_is_better=False) == [3, 1, 2]


def test_welch_indistinguishable() -> None:
    assert stats.welch_indistinguishable([80, 81, 79], [79.5, 80.5, 80])
    assert not stats.welch_indistinguishable([80, 81, 79], [60, 61, 59])
    assert stats.welch_indistinguishable([5, 5, 5], [5, 5, 5])
    assert not stats.welch_indistinguishable([5, 5, 5], [6, 6, 6])
    assert not stats.welch_indistinguishable([5], [5, 5])  # one seed says nothing about noise


def test_noise_groups_from_the_best() -> None:
    samples = [[71.5, 72.5, 70.5], [75.0, 75.5, 76.0], [71.0, 70.0, 72.0], [40.0, 41.0, 42.0]]
    assert stats.noise_groups(samples) == [2, 1, 2, 3]
    assert stats.noise_groups([[1.0, 1.1, 0.9], [5.0, 5.1, 4.9]], higher_is_better=False) == [1, 2]


def test_noise_groups_pair_cells_that_share_their_seeds() -> None:
    # a steady +1.5 gap on every seed under a large seed-to-seed spread: the per-seed differences
    # tell the two apart (paired), the two means' spreads do not (Welch)
    leader, runner = [80.0, 90.0, 70.0], [78.5, 88.4, 68.6]
    assert stats.welch_indistinguishable(leader, runner)
    same = [[0, 1, 2], [0, 1, 2]]
    assert stats.noise_groups([leader, runner], seeds=same) == [1, 2]
    assert stats.noise_groups_tested([leader, runner], seeds=same) == [(1, ""), (2, "")]
    # other seeds: nothing to pair, Welch's test, named
    other = [[0, 1, 2], [3, 4, 5]]
    assert stats.noise_groups_tested([leader, runner], seeds=other) == [(1, ""), (1, "Welch")]
    near = [80.0, 90.0, 70.0], [79.0, 91.0, 69.5]
    assert stats.noise_groups_tested(list(near), seeds=same) == [(1, ""), (1, "paired")]


def test_the_track_groups_agree_with_the_headline_difference() -> None:
    """The group (track page) and the Δ verdict (index) of the same pair come from one test."""
    leader, runner, seeds = [80.0, 90.0, 70.0], [78.5, 88.4, 68.6], [0, 1, 2]
    d = stats.difference(leader, seeds, runner, seeds)
    groups = stats.noise_groups([leader, runner], seeds=[seeds, seeds])
    assert d.paired and (groups[1] == 1) == d.within_noise
