"""The record frame → one table per track: the records a track admits, seeds aggregated per
configuration and partition, competition ranks and noise groups per pool, what sets a row apart
from its pool, and the paper-reported numbers that match the track (docs/design.md §1.2). Pure
pandas; no HTML, no I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from benchmark.records.reference import ReferenceValue
from leaderboard import stats
from leaderboard.formatting import finite
from leaderboard.labels import variant_labels
from leaderboard.margins import paired_margins
from leaderboard.site_config import Track


class CardMixError(ValueError):
    """Numbers of different protocol cards would share a column."""


@dataclass
class TrackTable:
    track: Track
    card_id: str | None
    card_name: str | None
    card_summary: str | None
    metric: str | None
    higher_is_better: bool
    table: pd.DataFrame  # one row per (method, partition): see TABLE_COLUMNS
    # record rows excluded from main columns (their card selects on the test set)
    selects_on_test: pd.DataFrame
    # record rows of the track's task whose card is not the track's card
    excluded_cards: pd.DataFrame
    references: list[dict[str, Any]] = field(default_factory=list)
    # paired margins over track.baseline (leaderboard.margins), if it has one
    margins: pd.DataFrame | None = None
    # baseline → paired margins over it, for each of the site's headline baselines that has records
    # on the track
    margins_by: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def cell_ids(self) -> set[str]:
        return {c for ids in self.table["cell_ids"] for c in ids}


TABLE_COLUMNS = [
    "method",
    "method_version",
    "variant",
    "backbone",
    "config_key",
    "row_key",
    "partition_label",
    "partition_short",
    "partition_name",
    "partition_params",
    "partition_digest",
    "alpha",
    "status",
    "n_seeds",
    "n_diverged",
    "seeds",
    "values",
    "reported_values",
    "mean",
    "std",
    "ci_low",
    "ci_high",
    "partial_mean",
    "rank",
    "noise_group",
    "noise_test",
    "best",
    "differs",
    "reference",
    "bytes",
    "bytes_per_client",
    "wall_time_s",
    "gpu_hours",
    "fl_rounds",
    "fl_local_epochs",
    "client_steps",
    "client_samples",
    "clients_without_step",
    "machines",
    "git_shas",
    "uses_public_data",
    "verified",
    "reevaluated",
    "unboxed",
    "retrained",
    "traffic_underived",
    "submitted",
    "cell_ids",
    "card_id",
    "entry_id",
]


def select_track(frame: pd.DataFrame, track: Track) -> pd.DataFrame:
    """Rows of the track's task from the records the track admits (``Track.admits``, the rule
    ``submit`` applies too: dataset, backbone and federation settings, scored on the test split —
    validation runs choose hyperparameters and are never leaderboard numbers); any card (the caller
    sorts cards out)."""
    if frame.empty:
        return frame
    admitted = frame["record"].map(lambda r: track.admits(r) is None).astype(bool)
    return frame[admitted & (frame["task"] == track.task)]


def check_single_card(rows: pd.DataFrame, where: str) -> str | None:
    """The one card_id of ``rows`` (None if none is known). Raises :class:`CardMixError` for two or
    more."""
    ids = sorted({c for c in rows["card_id"] if isinstance(c, str)})
    if len(ids) > 1:
        counts = rows.groupby("card_id").size().to_dict()
        raise CardMixError(
            f"{where}: numbers from {len(ids)} protocol cards would share a column: {counts}. "
            "Pin one with `card_id:` in tracks.yaml (or split the track)."
        )
    return ids[0] if ids else None


def aggregate(rows: pd.DataFrame, track: Track, higher_is_better: bool = True) -> pd.DataFrame:
    """Seeds → one row per (method, method version, configuration, partition label, partition
    digest), then ranks.

    Cells with fewer successful seeds than ``track.min_seeds`` are ``incomplete``: they keep their
    per-seed values but get no mean, no rank and no noise group. Every (method, partition) pair seen
    on the track that has no record at all is added as ``missing``. Reference points (``reference``)
    are aggregated alike and never ranked.
    """
    check_single_card(rows, f"track {track.id}")
    keys = ["method", "method_version", "config_key", "partition_label", "partition_digest"]
    variants = track_variants(rows)
    out = [
        _aggregate_one(dict(zip(keys, key)), g, track, variants)
        for key, g in rows.groupby(keys, sort=True, dropna=False)
    ]
    table = pd.DataFrame(out, columns=TABLE_COLUMNS)
    table = _add_missing(table)
    return rank_table(table, higher_is_better)


def track_variants(rows: pd.DataFrame) -> dict[str, str]:
    """config_key → a readable label of what tells it apart from the same method's other
    configurations on the track (the backbone's name, ``lr=0.32``); "" for a method run in one
    configuration."""
    out: dict[str, str] = {}
    for _, g in rows.groupby("method", sort=False):
        configs = g.drop_duplicates("config_key")
        bodies = {k: json.loads(c) for k, c in zip(configs["config_key"], configs["row_config"])}
        fl = {
            k: {"fl": {"num_clients": n, "participation": p}}
            for k, n, p in zip(
                configs["config_key"], configs["fl_num_clients"], configs["fl_participation"]
            )
        }
        out.update(
            variant_labels({k: {**bodies[k], **_merge_fl(bodies[k], fl[k])} for k in bodies})
        )
    return out


def _merge_fl(body: Mapping[str, Any], fl: Mapping[str, Any]) -> dict[str, Any]:
    return {"fl": {**dict(body.get("fl") or {}), **fl["fl"]}}


def entry_id(track_id: str, key: Mapping[str, Any]) -> str:
    """The file name (without .html) of the page behind one table row: the seeds of one
    configuration on one partition of one track."""
    raw = json.dumps([track_id, key["config_key"], key["partition_label"], key["partition_digest"]])
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def _aggregate_one(
    key: dict[str, Any], g: pd.DataFrame, track: Track, variants: Mapping[str, str]
) -> dict[str, Any]:
    ok = g[g["status"].eq("ok") & g["value"].notna()].sort_values("seed")
    n_div = int((g["status"] == "diverged").sum())
    values = [float(v) for v in ok["value"]]
    reported = [float(v) for v in ok["reported"]]
    complete = len(values) >= track.min_seeds
    summary = stats.summarize(values) if complete else None
    card_ids = sorted({c for c in g["card_id"] if isinstance(c, str)})
    first = g.iloc[0]
    return {
        **key,
        "variant": variants.get(key["config_key"], ""),
        "backbone": first.get("backbone") or "",
        "row_key": first["row_key"],
        "partition_short": first["partition_short"],
        "partition_name": first["partition_name"],
        "partition_params": first["partition_params"],
        "alpha": first["alpha"],
        "status": "complete"
        if complete
        else ("diverged" if n_div and not values else "incomplete"),
        "n_seeds": len(values),
        "n_diverged": n_div,
        "seeds": [int(s) for s in ok["seed"]],
        "values": values,
        # the records' own values, when re-evaluation reproduced another (shown beside the
        # reproduced one)
        "reported_values": reported if reported != values else [],
        "mean": summary.mean if summary else math.nan,
        "std": summary.std if summary else math.nan,
        "ci_low": summary.ci_low if summary else math.nan,
        "ci_high": summary.ci_high if summary else math.nan,
        # an incomplete cell's mean over the seeds it has: plotted hollow and shown greyed, never
        # ranked
        "partial_mean": math.fsum(values) / len(values) if values and not complete else math.nan,
        "rank": None,
        "noise_group": None,
        "noise_test": "",
        "best": False,
        "differs": "",
        "reference": bool(first["reference"]),
        "bytes": float(g["bytes"].mean()),
        "bytes_per_client": float(g["bytes_per_client"].mean()),
        "wall_time_s": float(g["wall_time_s"].mean()),
        "gpu_hours": float(g["gpu_hours"].mean()),
        "fl_rounds": first["fl_rounds"],
        "fl_local_epochs": first["fl_local_epochs"],
        "client_steps": float(g["client_steps"].mean()),
        "client_samples": float(g["client_samples"].mean()),
        "clients_without_step": float(g["clients_without_step"].mean()),
        "machines": sorted(set(g["machine"])),
        "git_shas": sorted(set(g["git_sha"])),
        "uses_public_data": bool(g["uses_public_data"].any()),
        "verified": bool(g["verified"].all()),
        # every seed behind the row: a row is as trusted as its weakest
        "reevaluated": bool(g["reevaluated"].all()),
        # a seed whose method's code ran at accept without a box (accept --unboxed)
        "unboxed": bool(g["unboxed"].any()) if "unboxed" in g else False,
        # every seed's training re-run by accept (a re-training track); else only re-evaluated
        "retrained": bool(g["retrained"].all()) if "retrained" in g else False,
        # a seed accepted with traffic its method does not declare: not ranked on communication
        "traffic_underived": bool(g["traffic_underived"].any())
        if "traffic_underived" in g
        else False,
        # a seed of a method whose settings were not tuned on the validation split here
        "submitted": bool(g["submitted"].any()),
        "cell_ids": sorted(g["cell_id"].unique().tolist()),
        "card_id": card_ids[0] if card_ids else None,
        "entry_id": entry_id(track.id, key),
    }


_SETTING_KEYS = (
    "partition_label",
    "partition_digest",
    "alpha",
    "partition_short",
    "partition_name",
    "partition_params",
)
_CONFIG_KEYS = (
    "method",
    "method_version",
    "variant",
    "backbone",
    "config_key",
    "row_key",
    "reference",
    "submitted",
    "fl_rounds",
    "fl_local_epochs",
)
_NOTHING = {
    "status": "missing",
    "machines": [],
    "git_shas": [],
    "n_seeds": 0,
    "n_diverged": 0,
    "seeds": [],
    "values": [],
    "reported_values": [],
    "mean": math.nan,
    "std": math.nan,
    "ci_low": math.nan,
    "ci_high": math.nan,
    "partial_mean": math.nan,
    "bytes": math.nan,
    "bytes_per_client": math.nan,
    "wall_time_s": math.nan,
    "gpu_hours": math.nan,
    "client_steps": math.nan,
    "client_samples": math.nan,
    "clients_without_step": math.nan,
    "uses_public_data": False,
    "verified": True,
    "reevaluated": False,
    "unboxed": False,
    "retrained": False,
    "traffic_underived": False,
    "cell_ids": [],
}


def _add_missing(table: pd.DataFrame) -> pd.DataFrame:
    """A ``missing`` row for every configuration of a method seen on the track and every partition
    setting it has no record under, so that a gap is shown rather than dropped."""
    if table.empty:
        return table
    settings = table[list(_SETTING_KEYS)].drop_duplicates(["partition_label", "partition_digest"])
    # A configuration counts as present in a partition setting when it has a row with that label
    # under any digest: a method that carves a public split (FLESD) partitions the rest, so its
    # digest differs without a cell missing.
    present = set(zip(table["config_key"], table["partition_label"]))
    extra = []
    for _, mine in (
        table.drop_duplicates("config_key").sort_values(["method", "config_key"]).iterrows()
    ):
        for _, s in settings.drop_duplicates("partition_label").iterrows():
            if (mine["config_key"], s["partition_label"]) not in present:
                extra.append(_missing_row(mine, s))
    if extra:
        table = pd.concat([table, pd.DataFrame(extra, columns=TABLE_COLUMNS)], ignore_index=True)
    return table


def _missing_row(config: pd.Series, setting: pd.Series) -> dict[str, Any]:
    """The row of a configuration that has no record under a partition setting."""
    return (
        {c: None for c in TABLE_COLUMNS}
        | {k: config[k] for k in _CONFIG_KEYS}
        | {k: setting[k] for k in _SETTING_KEYS}
        | {k: (list(v) if isinstance(v, list) else v) for k, v in _NOTHING.items()}
    )


def rank_table(table: pd.DataFrame, higher_is_better: bool = True) -> pd.DataFrame:
    """Competition ranks and noise groups among the complete cells of one pool: one partition
    setting (label) of one track, so one (dataset, partition label, task, card). A method that
    changes the clients' data (FLESD's public split gives another partition digest) or trains on
    another budget is ranked in the same pool, never in a pool of its own, and ``differs`` says in
    words what differs (:func:`pool_differences`). ``best`` marks the one rank-1 cell of a pool with
    two or more ranked cells; a tie for first marks none. Reference points (random init, central
    training, ...) are never ranked. Sorted by partition (IID first, then decreasing α), rank,
    method."""
    table = table.copy()
    for col in ("rank", "noise_group"):
        table[col] = pd.Series([None] * len(table), dtype=object)
    table["noise_test"] = ""
    table["best"] = False
    table["differs"] = ""
    for _, g in table.groupby("partition_label", dropna=False):
        mine = g[~g["reference"].fillna(False).astype(bool)]
        for idx, why in pool_differences(mine).items():
            table.at[idx, "differs"] = why
        done = mine[mine["status"] == "complete"]
        if done.empty:
            continue
        ranks = stats.competition_ranks(done["mean"].tolist(), higher_is_better)
        # paired over seeds where a cell and its group's best cell share them, Welch's otherwise: the
        # test the index's "beyond noise" verdict on the same pair uses (stats.difference)
        groups = stats.noise_groups_tested(
            done["values"].tolist(), higher_is_better, done["seeds"].tolist()
        )
        for idx, rank, (group, test) in zip(done.index, ranks, groups):
            table.at[idx, "rank"] = int(rank)
            table.at[idx, "noise_group"] = int(group)
            table.at[idx, "noise_test"] = test
        if len(done) > 1 and ranks.count(1) == 1:
            table.at[done.index[ranks.index(1)], "best"] = True
    order_alpha = table["alpha"].map(
        lambda a: -a if isinstance(a, (int, float)) and not pd.isna(a) else math.inf
    )
    table = table.assign(
        _a=order_alpha, _r=table["rank"].map(lambda r: r if r is not None else 10**9)
    )
    table = table.sort_values(["_a", "partition_label", "_r", "method"], kind="mergesort")
    return table.drop(columns=["_a", "_r"]).reset_index(drop=True)


def _mode(values: Sequence[Any]) -> Any:
    """The most common value; among equally common ones the first in sorted text order
    (deterministic)."""
    counts: dict[str, tuple[int, Any]] = {}
    for v in values:
        key = json.dumps(v, sort_keys=True, default=str)
        counts[key] = (counts.get(key, (0, v))[0] + 1, v)
    return max(sorted(counts.items()), key=lambda kv: kv[1][0])[1][1] if counts else None


def _budget_words(rounds: Any, epochs: Any) -> str:
    parts = [f"{name}={int(v)}" for name, v in (("R", rounds), ("E", epochs)) if finite(v)]
    return " × ".join(parts) or "not recorded"


# A row whose optimizer steps, or training samples, differ from its pool's median by this factor or
# more is flagged (Orchestra's paper batch of 16 gives it 3.5x the steps of batch-64 comparators
# on one R x E): 1.5x is beyond the few batches drop_last moves between methods.
BUDGET_RATIO = 1.5


def pool_differences(rows: pd.DataFrame) -> dict[Any, str]:
    """index → what sets a row apart from the rest of its ranking pool, in words ("" rows are left
    out): the backbone (another than the pool's most common one: FedMAE's ViT beside ResNets),
    clients' data (a partition digest other than the pool's most common one, e.g. after a
    public split) and training budget: rounds R × local epochs E other than the pool's most common,
    and optimizer steps or training samples summed over clients :data:`BUDGET_RATIO` times the
    pool's median or more (or less). A pool of one differs from nothing."""
    rows = rows[rows["status"] != "missing"]
    if rows["method"].nunique() < 2:
        return {}
    digest = _mode(rows["partition_digest"].tolist())
    budgets = list(zip(rows["fl_rounds"], rows["fl_local_epochs"]))
    budget = _mode([list(b) for b in budgets])
    typical = {key: _typical(rows[key]) for key in ("client_steps", "client_samples")}
    no_steps = rows.get("clients_without_step", pd.Series(math.nan, index=rows.index))
    no_step = _mode([v for v in no_steps.tolist() if finite(v)])
    backbones = rows["backbone"].tolist() if "backbone" in rows else []
    backbone = _mode([b for b in backbones if b])
    out: dict[Any, str] = {}
    for idx, r, b in zip(rows.index, rows.to_dict("records"), budgets):
        why = []
        if backbone and r.get("backbone") and r["backbone"] != backbone:
            # one pool per partition, whatever the backbone: a method that only runs on another
            # backbone (FedMAE's ViT) is ranked with the rest and says so
            why.append(f"other backbone: {r['backbone']} (most of the pool: {backbone})")
        if r["partition_digest"] != digest:
            public = " (a public split carved out of the training set)"
            why.append(
                "other client data: a different partition digest"
                + (public if r["uses_public_data"] else "")
            )
        if list(b) != budget:
            why.append(f"other budget: {_budget_words(*b)} (the others: {_budget_words(*budget)})")
        for key, words in (("client_steps", "optimizer steps"), ("client_samples", "samples")):
            if _unrecorded(r, key, typical[key]):  # a zero or missing budget is no way around it
                why.append(
                    f"no client {words} recorded (0 or missing; the pool's median is "
                    f"{typical[key]:,.0f})"
                )
                continue
            ratio = _ratio(r[key], typical[key])
            if ratio is not None and not 1 / BUDGET_RATIO < ratio < BUDGET_RATIO:
                why.append(
                    f"{ratio:.1f}x the client {words} of the pool ({r[key]:,.0f}; median "
                    f"{typical[key]:,.0f})"
                )
        none = r.get("clients_without_step")
        if finite(none) and none != no_step:
            # the small-client policy (docs/protocols/small-clients.md) treats every method alike,
            # so a difference here is a client some method could not train (one image)
            why.append(
                f"{none:,.4g} client participations took no optimizer step (most of the pool: "
                f"{no_step:,.4g})"
            )
        if why:
            out[idx] = "; ".join(why)
    return out


def _unrecorded(row: Mapping[str, Any], key: str, typical: float) -> bool:
    """A row that states no budget (0, negative or missing) in a pool that trains, unless it is a
    baseline that trains nothing (random init): flagged like a different budget (issue 44)."""
    from leaderboard.formatting import BASELINE_NAMES

    value = row[key]
    return (
        finite(typical)
        and typical > 0
        and row["method"] not in BASELINE_NAMES
        and not (finite(value) and value > 0)
    )


def _typical(values: pd.Series) -> float:
    """The median of a pool's budgets over the rows that trained (a reference point that trains
    nothing, or a record that did not count it, has none)."""
    trained = [float(v) for v in values if finite(v) and v > 0]
    return float(statistics.median(trained)) if trained else math.nan


def _ratio(value: Any, typical: float) -> float | None:
    if not (finite(value) and value > 0 and finite(typical) and typical > 0):
        return None
    return float(value) / typical


def reference_matches(ref: ReferenceValue, track: Track) -> bool:
    """Same dataset and task family, and no federation setting the reference states (K,
    participation) that contradicts the track's: a cross-silo number is not shown, let alone ranked,
    on a cross-device track."""
    if (
        ref.ablation
        or ref.settings.get("dataset") != track.dataset
        or ref.task != track.task_family
    ):
        return False
    return all(ref.settings.get(k, v) == v for k, v in track.federation.items())


def reference_alpha(ref: ReferenceValue) -> float | None:
    if ref.settings.get("iid") is True or ref.settings.get("partition") == "iid":
        return math.inf
    a = ref.settings.get("alpha")
    return float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else None


def track_references(
    refs: Sequence[ReferenceValue],
    track: Track,
    card_id: str | None,
    table: pd.DataFrame,
    higher_is_better: bool,
) -> list[dict[str, Any]]:
    """Paper-reported numbers for a track's dataset and task family. They are marked ``comparable``
    (and given the rank they would take among our complete cells of the same α) only when their
    card_id equals ours and they do not select on the test set; otherwise they are shown beside ours
    and never ranked."""
    out = []
    for ref in refs:
        if not reference_matches(ref, track):
            continue
        comparable = bool(card_id) and ref.card_id == card_id and not ref.selects_on_test
        would_rank = None
        alpha = reference_alpha(ref)
        if comparable and alpha is not None:
            peers = table[(table["status"] == "complete") & (table["alpha"] == alpha)][
                "mean"
            ].tolist()
            would_rank = stats.competition_ranks([ref.percent, *peers], higher_is_better)[0]
        why = (
            "same protocol card"
            if comparable
            else "selects on the test set"
            if ref.selects_on_test
            else "none of our records on this track yet"
            if not card_id
            else f"different protocol card ({ref.card})"
        )
        out.append(
            {
                "ref": ref,
                "alpha": alpha,
                "comparable": comparable,
                "would_rank": would_rank,
                "why": why,
            }
        )
    return out


def build_track(
    frame: pd.DataFrame,
    track: Track,
    refs: Sequence[ReferenceValue] = (),
    baselines: Sequence[str] = (),
) -> TrackTable:
    """One track's table. ``baselines``: the reference points every row's headline margin is paired
    against (``site.margin_baselines``); those without a record on the track are left out."""
    rows = select_track(frame, track)
    if track.card_id is not None:
        card_ok = rows["card_id"].isna() | (rows["card_id"] == track.card_id)
    elif track.card is not None:
        card_ok = rows["card_id"].isna() | (rows["card_name"] == track.card)
    else:
        card_ok = pd.Series(True, index=rows.index)
    in_card, excluded = rows[card_ok.astype(bool)], rows[~card_ok.astype(bool)]
    test_selected = in_card[in_card["selects_on_test"].astype(bool)]
    main = in_card[~in_card["selects_on_test"].astype(bool)]
    card_id = check_single_card(main, f"track {track.id}")
    scored = main[main["card_id"].notna()]
    higher = bool(scored["higher_is_better"].iloc[0]) if not scored.empty else True
    table = (
        aggregate(main, track, higher) if not main.empty else pd.DataFrame(columns=TABLE_COLUMNS)
    )
    return TrackTable(
        track=track,
        card_id=card_id,
        card_name=scored["card_name"].iloc[0] if not scored.empty else track.card,
        card_summary=scored["card_summary"].iloc[0] if not scored.empty else None,
        metric=scored["metric"].iloc[0] if not scored.empty else None,
        higher_is_better=higher,
        table=table,
        selects_on_test=test_selected,
        excluded_cards=excluded,
        references=track_references(refs, track, card_id, table, higher),
        margins=paired_margins(main, task=track.task, baseline=track.baseline)
        if track.baseline
        else None,
        margins_by={
            b: paired_margins(main, task=track.task, baseline=b)
            for b in baselines
            if (main["method"] == b).any()
        },
    )
