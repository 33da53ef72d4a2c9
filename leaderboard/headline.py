"""The answer first: per track and partition, the leader, its Δ to the runner-up and every ranked
method's paired margin over the random-init reference points. Pure functions over
:class:`leaderboard.build.TrackTable`; no I/O.

A reader comes with one question (*which method is best here, by how much, and is it beyond
noise?*); the index and each dataset summary open with this answer. Nothing is recomputed that the
track tables already hold: the ranks, means and seeds are theirs; Δ is
:func:`leaderboard.stats.difference` (paired by seed when the two cells have the same seeds) and the
margins are :func:`leaderboard.margins.paired_margins` over each baseline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from leaderboard import stats


@dataclass(frozen=True)
class MarginCell:
    baseline: str
    margin: float
    ci_low: float  # nan when fewer than two seeds pair
    ci_high: float
    n: int

    @property
    def within_noise(self) -> bool:
        return not (self.ci_low > 0 or self.ci_high < 0)


@dataclass(frozen=True)
class MethodLine:
    row: Mapping[str, Any]  # the track-table row (ranked, complete)
    margins: tuple[
        MarginCell | None, ...
    ]  # aligned with Headline.baselines; None: no partner of the same seed


@dataclass(frozen=True)
class Headline:
    track_id: str
    track_label: str
    dataset: str
    partition_label: str
    partition_short: str
    metric: str | None
    leader: Mapping[str, Any] | None  # None: nobody ranked, or a tie for first (see ``tie``)
    runner_up: Mapping[str, Any] | None
    tie: bool  # two or more cells share rank 1
    # leader − runner-up; with runners-up tied on one mean, the difference to the one the test is
    # least sure of (the lowest interval bound), so that the verdict never depends on their order
    delta: stats.Difference | None
    baselines: tuple[str, ...]
    lines: tuple[MethodLine, ...] = field(default_factory=tuple)  # every ranked method, by rank
    # the best-ranked row whose data and budget are its pool's ("not like for like" rows skipped),
    # when the leader is flagged; None when the leader is like for like or nobody is
    like_for_like: Mapping[str, Any] | None = None
    # the pool's complete reference points (never ranked), best mean first: what the input itself,
    # random init, ... score beside the ranking
    references: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    higher_is_better: bool = True
    # every cell that shares the runner-up's mean (two or more: a tie, named as such), by method
    runners_up: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    # the other ranked cells the test cannot tell from the leader (its noise group 1 on the track
    # page) that are not runners-up: a "beyond noise" Δ to the runner-up is not a clear lead then
    also_within: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)


def _margin(table: pd.DataFrame | None, row: Mapping[str, Any], baseline: str) -> MarginCell | None:
    if table is None or table.empty:
        return None
    hit = table[
        (table["config_key"] == row["config_key"])
        & (table["partition_label"] == row["partition_label"])
    ]
    if hit.empty:
        return None
    m = hit.iloc[0]
    return MarginCell(
        baseline, float(m["margin"]), float(m["ci_low"]), float(m["ci_high"]), int(m["n"])
    )


def headline(tt: Any, partition_label: str, baselines: Sequence[str]) -> Headline:
    """The answer for one pool (a partition of a track): ``tt`` is a ``TrackTable`` whose
    ``margins_by`` maps each baseline to its paired-margins table."""
    table = tt.table
    pool = table[(table["partition_label"] == partition_label) & table["rank"].notna()]
    pool = pool.sort_values(["rank", "method"], kind="mergesort")
    rows = pool.to_dict("records")
    first = table[table["partition_label"] == partition_label].iloc[0]
    tie = sum(r["rank"] == 1 for r in rows) > 1
    leader = rows[0] if rows and not tie else None
    runner = None
    runners: list[Mapping[str, Any]] = []
    delta = None
    if leader is not None and len(rows) > 1:
        runners = sorted((r for r in rows[1:] if r["mean"] == rows[1]["mean"]), key=_name)
        diffs = [_lead(tt, leader, r) for r in runners]
        # the runner-up the verdict is least sure about: within noise of the leader if any tied one
        # is; ties in the bound are broken by name, never by table order
        k = min(range(len(runners)), key=lambda k: (_unsure(diffs[k]), _name(runners[k])))
        runner, delta = runners[k], diffs[k]
    named = {id(r) for r in runners}
    also = tuple(
        r
        for r in rows[1:]
        if leader is not None
        and id(r) not in named
        and stats.indistinguishable(leader["values"], leader["seeds"], r["values"], r["seeds"])[0]
    )
    like = None
    if leader is not None and leader.get("differs"):
        like = next((r for r in rows if not r.get("differs")), None)
    refs = table[
        (table["partition_label"] == partition_label)
        & table["reference"].fillna(False).astype(bool)
        & (table["status"] == "complete")
    ]
    sign = -1.0 if tt.higher_is_better else 1.0
    references = tuple(
        sorted(refs.to_dict("records"), key=lambda r: (sign * r["mean"], str(r["method"])))
    )
    margins_by: Mapping[str, pd.DataFrame] = getattr(tt, "margins_by", {}) or {}
    lines = tuple(
        MethodLine(r, tuple(_margin(margins_by.get(b), r, b) for b in baselines)) for r in rows
    )
    return Headline(
        track_id=tt.track.id,
        track_label=tt.track.short,
        dataset=tt.track.dataset,
        partition_label=partition_label,
        partition_short=str(first["partition_short"]),
        metric=tt.metric,
        leader=leader,
        runner_up=runner,
        tie=tie,
        delta=delta,
        baselines=tuple(baselines),
        lines=lines,
        like_for_like=like,
        references=references,
        higher_is_better=bool(tt.higher_is_better),
        runners_up=tuple(runners),
        also_within=also,
    )


def _name(r: Mapping[str, Any]) -> tuple[str, str, str]:
    return str(r["method"]), str(r.get("variant") or ""), str(r.get("config_key") or "")


def _unsure(d: stats.Difference) -> tuple[int, float]:
    """Sorts the difference the test is least sure of first: within noise, then the lowest bound."""
    low = d.ci_low if math.isfinite(d.ci_low) else -math.inf
    return (0 if d.within_noise else 1, low)


def _lead(tt: Any, leader: Mapping[str, Any], runner: Mapping[str, Any]) -> stats.Difference:
    """How much the leader is better than ``runner``: positive either way of the metric."""
    d = stats.difference(leader["values"], leader["seeds"], runner["values"], runner["seeds"])
    if tt.higher_is_better:
        return d
    return stats.Difference(-d.delta, -d.ci_high, -d.ci_low, d.paired, d.n)


def dataset_headlines(tables: Sequence[Any], baselines: Sequence[str]) -> list[Headline]:
    """One headline per (track, partition) with ranked cells, in track order, partitions as the
    tables sort them (IID first, then decreasing α)."""
    out = []
    for tt in tables:
        if tt.table.empty:
            continue
        for label in dict.fromkeys(tt.table["partition_label"]):
            if tt.table[(tt.table["partition_label"] == label)]["rank"].notna().any():
                out.append(
                    headline(
                        tt, label, [b for b in baselines if b in getattr(tt, "margins_by", {})]
                    )
                )
    return out
