"""Records → tables: load, select per track, aggregate seeds, rank (docs/design.md §1.2). Pure
pandas; no HTML here.

``build_model(results_dirs)`` loads the records and builds the :class:`SiteModel`;
``leaderboard.site.build_site`` hands it to :mod:`leaderboard.render` (the one-call entry point of
``python -m leaderboard build`` and the quickstart).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import statistics
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from benchmark.records.reference import ReferenceTable, ReferenceValue, load_references
from benchmark.records.schema import ResultRecord
from benchmark.records.store import Skipped, iter_record_files, read_record, verify_record
from leaderboard import stats
from leaderboard.labels import disambiguate, partition_short, variant_labels
from leaderboard.margins import paired_margins
from leaderboard.summary import SummaryTable, build_summary, paper_pairs
from leaderboard.tracks import SiteConfig, Track, load_site_config, load_tracks

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCES = REPO / "results" / "reference"
VERIFIED_RUNNER = "fssl-bench"


class CardMixError(ValueError):
    """Numbers of different protocol cards would share a column."""


# ----------------------------------------------------------------------------------------------------
# loading


def load_acceptances(
    results_dirs: Iterable[Path | str], records: Sequence[tuple[Path, ResultRecord]]
) -> tuple[dict[str, dict[str, Any]], list[Skipped]]:
    """cell_id → the acceptance that marks the record re-evaluated (``benchmark accept`` wrote it
    under ``<results>/acceptances/``; ``benchmark.records.acceptance.reevaluated`` verifies it
    against the record). An acceptance whose digest does not match, or that does not vouch for the
    record it names (the record was edited, a score is not covered or lies outside the tolerance),
    comes back as ``Skipped``: the record shows as reported."""
    from benchmark.records.acceptance import find_acceptances, read_acceptance, reevaluated

    by_digest = {r.digest: r for _, r in records}
    out: dict[str, dict[str, Any]] = {}
    skipped: list[Skipped] = []
    for path in find_acceptances(Path(d) for d in results_dirs):
        try:
            acc = read_acceptance(path)
        except ValueError as exc:
            skipped.append(Skipped(path, f"acceptance ignored: {exc}"))
            continue
        record = by_digest.get(acc.get("record_digest"))
        if record is None:
            same_cell = [r for _, r in records if r.cell_id == acc.get("cell_id")]
            if same_cell:  # the record it accepted was edited since: its mark does not carry over
                skipped.append(
                    Skipped(
                        path,
                        "acceptance ignored: it names a record digest that no record has (the "
                        f"record of cell {acc.get('cell_id')} changed after it was accepted)",
                    )
                )
            continue
        why = reevaluated(record, acc)
        if why:
            skipped.append(Skipped(path, f"acceptance ignored: {why}"))
            continue
        out[record.cell_id] = acc
    return out, skipped


def load_all(
    results_dirs: Iterable[Path | str],
) -> tuple[list[tuple[Path, ResultRecord]], list[Skipped]]:
    """Every record under the given folders (recursively), deduplicated by cell_id. Nothing here
    raises: malformed, truncated or schema-incompatible files, and conflicting duplicates, come back
    as ``Skipped``."""
    good: list[tuple[Path, ResultRecord]] = []
    skipped: list[Skipped] = []
    seen: dict[str, tuple[Path, ResultRecord]] = {}
    for root in results_dirs:
        root = Path(root)
        if not root.exists():
            skipped.append(Skipped(root, "results folder does not exist"))
            continue
        for path in iter_record_files(root):
            try:
                record = read_record(path)
            except Exception as exc:  # noqa: BLE001 - a bad file must never stop the build
                skipped.append(Skipped(path, f"{type(exc).__name__}: {exc}"))
                continue
            problems = verify_record(record)
            # edited, unsealed or inconsistent: the skipped page says why, never a table
            if problems:
                skipped.append(Skipped(path, "; ".join(problems)))
                continue
            shape = row_problem(path, record)
            if shape:  # a sealed record whose cell the tables cannot hold
                skipped.append(Skipped(path, shape))
                continue
            prior = seen.get(record.cell_id)
            if prior is not None:
                if prior[1] != record:
                    skipped.append(
                        Skipped(
                            path,
                            f"duplicate cell_id {record.cell_id} with different content "
                            f"than {prior[0]} (the first one is shown)",
                        )
                    )
                continue
            seen[record.cell_id] = (path, record)
            good.append((path, record))
    return good, skipped


def row_problem(path: Path, record: ResultRecord) -> str | None:
    """Why ``record`` cannot become table rows (its cell's sections of the wrong type), or None. The
    schema checks the record's typed fields; the cell is free-form, so its rows are built once here,
    where a failure is one skipped file and not a failed build."""
    try:
        records_frame([(path, record)])
    except Exception as exc:  # noqa: BLE001 - a bad file must never stop the build
        return f"the record's cell has the wrong shape for the tables ({type(exc).__name__}: {exc})"
    return None


# ----------------------------------------------------------------------------------------------------
# frames


def alpha_of(name: str | None, params: dict[str, Any] | None) -> float | None:
    """Heterogeneity α from a partition spec: ``iid`` → ∞, any partitioner with an ``alpha``
    parameter → α."""
    params = params or {}
    if name == "iid":
        return math.inf
    alpha = params.get("alpha")
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        return float(alpha)
    return None


def _verified(record: ResultRecord) -> bool:
    return record.env.runner == VERIFIED_RUNNER


RECORD_COLUMNS = [
    "cell_id",
    "method",
    "method_version",
    "dataset",
    "eval_split",
    "seed",
    "partition_label",
    "partition_name",
    "alpha",
    "partition_digest",
    "partition_params",
    "partition_short",
    "config_key",
    "row_key",
    "row_config",
    "method_params",
    "backbone",
    "backbone_key",
    "fl_num_clients",
    "fl_participation",
    "fl_rounds",
    "fl_local_epochs",
    "status",
    "task",
    "card_name",
    "card_id",
    "card_summary",
    "selects_on_test",
    "metric",
    "higher_is_better",
    "value",
    "reported",
    "bytes",
    "bytes_per_client",
    "wall_time_s",
    "gpu_hours",
    "client_steps",
    "client_samples",
    "machine",
    "git_sha",
    "uses_public_data",
    "verified",
    "reevaluated",
    "reference",
    "path",
    "record",
]


def _config_body(cell: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v for k, v in cell.items() if k not in ("seed", "tasks", "partition", "partition_seed")
    }


def _hash(body: Any) -> str:
    return hashlib.sha256(
        json.dumps(body, sort_keys=True, default=str).encode("utf-8")
    ).hexdigest()[:12]


def config_key(cell: Mapping[str, Any]) -> str:
    """What a table row stands for, besides its partition (a key of its own): the resolved cell
    without its seed, tasks and partition. Seeds of one configuration are averaged; two
    configurations of one method (another backbone, other hyperparameters, another federation) are
    two rows, never pooled as if they were seeds."""
    return _hash(_config_body(cell))


def row_config(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A dataset summary row: the configuration without the federation's size and participation
    (which each summary column, a track, fixes); rounds and local epochs stay part of the row."""
    body = _config_body(cell)
    body["fl"] = {
        k: v
        for k, v in dict(body.get("fl") or {}).items()
        if k not in ("num_clients", "participation")
    }
    return body


def machine_of(record: ResultRecord) -> str:
    """The hardware model a record ran on (``env.machine``); older records without it: the device
    alone."""
    return record.env.machine or f"{record.env.device} (model not recorded)"


def records_frame(
    records: Sequence[tuple[Path, ResultRecord]],
    reference_points: Iterable[str] = (),
    reevaluated: Iterable[str] = (),
) -> pd.DataFrame:
    """One row per (record, task score). A diverged record has no scores: it gets one row per task
    of its cell, with a missing value, so that it is counted (not dropped) on every track it belongs
    to. ``reference_points``: methods marked ``reference`` (shown apart, never ranked);
    ``reevaluated``: cell ids whose acceptance verified, or cell id → that acceptance
    (:func:`load_acceptances`): an accepted record's ``value`` is the value the maintainers
    reproduced, ``reported`` the record's own (so the tolerance cannot be spent on a raised
    score)."""
    rows: list[dict[str, Any]] = []
    refs = set(reference_points)
    accepted = set(reevaluated)
    acceptances = reevaluated if isinstance(reevaluated, Mapping) else {}
    for path, r in records:
        cell = r.cell if isinstance(r.cell, dict) else dict(r.cell)
        part = cell.get("partition") or {}
        fl = cell.get("fl") or {}
        body = row_config(cell)
        base = {
            "cell_id": r.cell_id,
            "method": r.method,
            "method_version": r.method_version,
            "dataset": r.dataset,
            "eval_split": eval_split_of(cell),
            "seed": r.seed,
            "partition_label": r.partition_label,
            "partition_name": part.get("name"),
            "alpha": alpha_of(part.get("name"), part.get("params")),
            "partition_digest": r.partition_digest,
            "partition_params": json.dumps(part.get("params") or {}, sort_keys=True, default=str),
            "partition_short": partition_short(part.get("name"), part.get("params")),
            "config_key": config_key(cell),
            "row_key": _hash(body),
            "row_config": json.dumps(body, sort_keys=True, default=str),
            "method_params": json.dumps(
                (cell.get("method") or {}).get("params") or {}, sort_keys=True, default=str
            ),
            "backbone": (cell.get("backbone") or {}).get("name"),
            "backbone_key": json.dumps(cell.get("backbone") or {}, sort_keys=True, default=str),
            "fl_num_clients": fl.get("num_clients"),
            "fl_participation": fl.get("participation"),
            "fl_rounds": fl.get("rounds"),
            "fl_local_epochs": fl.get("local_epochs"),
            "status": r.status,
            "bytes": r.comm.bytes_up + r.comm.bytes_down,
            "bytes_per_client": _per_client(
                r.comm.bytes_up + r.comm.bytes_down, fl.get("num_clients")
            ),
            "wall_time_s": r.compute.wall_time_s,
            "gpu_hours": r.compute.gpu_hours,
            "client_steps": r.compute.client_steps,
            # 0: not counted (a record written before client_samples existed): unknown, not none
            "client_samples": r.compute.client_samples or math.nan,
            "machine": machine_of(r),
            "git_sha": r.env.git_sha,
            "uses_public_data": bool(r.uses_public_data),
            "verified": _verified(r),
            "reevaluated": r.cell_id in accepted,
            "reference": r.method in refs,
            "path": str(path),
            # for Track.admits, the one membership rule (never exported: CSVs list their columns)
            "record": r,
        }
        if r.scores:
            for s in r.scores:
                again = reproduced_value(acceptances.get(r.cell_id), s)
                rows.append(
                    {
                        **base,
                        "task": s.task,
                        "card_name": s.card.name,
                        "card_id": s.card.card_id,
                        "card_summary": s.card.summary,
                        "selects_on_test": s.card.selects_on_test,
                        "metric": s.main_metric,
                        "higher_is_better": s.higher_is_better,
                        "value": s.main if again is None else again,
                        "reported": s.main,
                    }
                )
        else:
            for t in cell.get("tasks") or [{}]:
                rows.append(
                    {
                        **base,
                        "task": (t or {}).get("name"),
                        "card_name": None,
                        "card_id": None,
                        "card_summary": None,
                        "selects_on_test": False,
                        "metric": None,
                        "higher_is_better": True,
                        "value": float("nan"),
                        "reported": float("nan"),
                    }
                )
    return _short_partitions(pd.DataFrame(rows, columns=RECORD_COLUMNS))


def reproduced_value(acceptance: Mapping[str, Any] | None, score: Any) -> float | None:
    """The main value of ``score`` as the acceptance reproduced it (None: no acceptance, or it has
    no such value)."""
    for entry in (acceptance or {}).get("scores") or []:
        if (
            isinstance(entry, Mapping)
            and entry.get("task") == score.task
            and entry.get("card_id") == score.card.card_id
            and entry.get("key") == score.main_metric
            and isinstance(entry.get("reproduced"), (int, float))
        ):
            return float(entry["reproduced"])
    return None


def _per_client(total: int, num_clients: Any) -> float:
    """Bytes up + down of the whole run divided by the number of clients K: one client's average
    traffic."""
    return total / num_clients if isinstance(num_clients, int) and num_clients > 0 else math.nan


def _short_partitions(frame: pd.DataFrame) -> pd.DataFrame:
    """Short partition labels, unique within each dataset (see
    :func:`leaderboard.labels.disambiguate`)."""
    if frame.empty:
        return frame
    frame = frame.copy()
    for _, g in frame.groupby("dataset", sort=False):
        parts = g.drop_duplicates("partition_label")
        fixed = disambiguate(
            dict(zip(parts["partition_label"], parts["partition_short"])),
            dict(zip(parts["partition_label"], parts["partition_name"].astype(str))),
        )
        frame.loc[g.index, "partition_short"] = g["partition_label"].map(fixed)
    return frame


# ----------------------------------------------------------------------------------------------------
# tracks


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
    "machines",
    "git_shas",
    "uses_public_data",
    "verified",
    "reevaluated",
    "cell_ids",
    "card_id",
    "entry_id",
]


def eval_split_of(cell: Mapping[str, Any]) -> str:
    """The split a record's tasks scored on: "test", or "validation" for hyperparameter selection
    runs."""
    return str(((cell.get("dataset") or {}).get("params") or {}).get("eval_split", "test"))


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
        "machines": sorted(set(g["machine"])),
        "git_shas": sorted(set(g["git_sha"])),
        "uses_public_data": bool(g["uses_public_data"].any()),
        "verified": bool(g["verified"].all()),
        # every seed behind the row: a row is as trusted as its weakest
        "reevaluated": bool(g["reevaluated"].all()),
        "cell_ids": sorted(g["cell_id"].unique().tolist()),
        "card_id": card_ids[0] if card_ids else None,
        "entry_id": entry_id(track.id, key),
    }


def _add_missing(table: pd.DataFrame) -> pd.DataFrame:
    """A ``missing`` row for every configuration of a method seen on the track and every partition
    setting it has no record under, so that a gap is shown rather than dropped."""
    if table.empty:
        return table
    settings = table[
        [
            "partition_label",
            "partition_digest",
            "alpha",
            "partition_short",
            "partition_name",
            "partition_params",
        ]
    ].drop_duplicates(["partition_label", "partition_digest"])
    # A configuration counts as present in a partition setting when it has a row with that label
    # under any digest: a method that carves a public split (FLESD) partitions the rest, so its
    # digest differs without a cell missing.
    present = set(zip(table["config_key"], table["partition_label"]))
    extra = []
    for _, mine in (
        table.drop_duplicates("config_key").sort_values(["method", "config_key"]).iterrows()
    ):
        for _, s in settings.drop_duplicates("partition_label").iterrows():
            if (mine["config_key"], s["partition_label"]) in present:
                continue
            extra.append(
                {c: None for c in TABLE_COLUMNS}
                | {
                    **{
                        k: mine[k]
                        for k in (
                            "method",
                            "method_version",
                            "variant",
                            "config_key",
                            "row_key",
                            "reference",
                            "fl_rounds",
                            "fl_local_epochs",
                        )
                    },
                    **{
                        k: s[k]
                        for k in (
                            "partition_label",
                            "partition_digest",
                            "alpha",
                            "partition_short",
                            "partition_name",
                            "partition_params",
                        )
                    },
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
                    "uses_public_data": False,
                    "verified": True,
                    "reevaluated": False,
                    "cell_ids": [],
                }
            )
    if extra:
        table = pd.concat([table, pd.DataFrame(extra, columns=TABLE_COLUMNS)], ignore_index=True)
    return table


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
        groups = stats.noise_groups(done["values"].tolist(), higher_is_better)
        for idx, rank, group in zip(done.index, ranks, groups):
            table.at[idx, "rank"] = int(rank)
            table.at[idx, "noise_group"] = int(group)
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
    parts = [
        f"{name}={int(v)}"
        for name, v in (("R", rounds), ("E", epochs))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ]
    return " × ".join(parts) or "not recorded"


# A row whose optimizer steps, or training samples, differ from its pool's median by this factor or
# more is flagged (Orchestra's paper batch of 16 gives it 3.5x the steps of batch-64 comparators
# on one R x E): 1.5x is beyond the few batches drop_last moves between methods.
BUDGET_RATIO = 1.5


def pool_differences(rows: pd.DataFrame) -> dict[Any, str]:
    """index → what sets a row apart from the rest of its ranking pool, in words ("" rows are left
    out): clients' data (a partition digest other than the pool's most common one, e.g. after a
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
    out: dict[Any, str] = {}
    for idx, r, b in zip(rows.index, rows.to_dict("records"), budgets):
        why = []
        if r["partition_digest"] != digest:
            public = " (a public split carved out of the training set)"
            why.append(
                "other client data: a different partition digest"
                + (public if r["uses_public_data"] else "")
            )
        if list(b) != budget:
            why.append(f"other budget: {_budget_words(*b)} (the others: {_budget_words(*budget)})")
        for key, words in (("client_steps", "optimizer steps"), ("client_samples", "samples")):
            ratio = _ratio(r[key], typical[key])
            if ratio is not None and not 1 / BUDGET_RATIO < ratio < BUDGET_RATIO:
                why.append(
                    f"{ratio:.1f}x the client {words} of the pool ({r[key]:,.0f}; median "
                    f"{typical[key]:,.0f})"
                )
        if why:
            out[idx] = "; ".join(why)
    return out


def _typical(values: pd.Series) -> float:
    """The median of a pool's budgets over the rows that trained (a reference point that trains
    nothing, or a record that did not count it, has none)."""
    trained = [float(v) for v in values if _finite_number(v) and v > 0]
    return float(statistics.median(trained)) if trained else math.nan


def _ratio(value: Any, typical: float) -> float | None:
    if not (_finite_number(value) and value > 0 and _finite_number(typical) and typical > 0):
        return None
    return float(value) / typical


def _finite_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


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


# ----------------------------------------------------------------------------------------------------
# the site


@dataclass
class SiteModel:
    records: list[tuple[Path, ResultRecord]]
    skipped: list[Skipped]
    frame: pd.DataFrame
    tracks: list[TrackTable]
    references: list[ReferenceTable]
    reference_errors: list[tuple[Path, str]]
    untracked: list[str]  # cell ids that no track shows
    sources: list[str] = field(default_factory=list)  # the results folders given
    repo: Path = REPO
    config: SiteConfig = field(default_factory=SiteConfig)
    # one per dataset with a non-empty track
    summaries: list[SummaryTable] = field(default_factory=list)
    # track id → ours beside the paper's
    pairs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    build: dict[str, str] = field(default_factory=dict)  # date, commit, repo_url (see build_info)
    # cell_id → verified acceptance
    acceptances: dict[str, dict[str, Any]] = field(default_factory=dict)

    def record(self, cell_id: str) -> ResultRecord | None:
        for _, r in self.records:
            if r.cell_id == cell_id:
                return r
        return None

    def cell_tracks(self) -> dict[str, list[tuple[TrackTable, str]]]:
        """cell_id → the tracks showing it, each with the entry (table row) it counts in."""
        out: dict[str, list[tuple[TrackTable, str]]] = {}
        for tt in self.tracks:
            for ids, entry in zip(tt.table["cell_ids"], tt.table["entry_id"]):
                for c in ids or []:
                    out.setdefault(c, []).append((tt, entry))
        return out


def build_info(repo: Path, repo_url: str = "") -> dict[str, str]:
    """When and from which commit the site was built. ``SOURCE_DATE_EPOCH`` (the reproducible-builds
    convention) pins the date; the commit is the checkout's HEAD, "unknown" outside git."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (
        datetime.fromtimestamp(int(epoch), tz=timezone.utc)
        if epoch and epoch.isdigit()
        else datetime.now(tz=timezone.utc)
    )
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return {
        "date": when.strftime("%Y-%m-%d %H:%M UTC"),
        "commit": sha or "unknown",
        "repo_url": repo_url.rstrip("/"),
    }


def build_model(
    results_dirs: Iterable[Path | str],
    *,
    tracks: Sequence[Track] | None = None,
    references_dir: Path | None = None,
    config: SiteConfig | None = None,
    repo_url: str | None = None,
) -> SiteModel:
    results_dirs = list(results_dirs)
    config = config if config is not None else load_site_config()
    records, skipped = load_all(results_dirs)
    acceptances, bad_acceptances = load_acceptances(results_dirs, records)
    skipped = skipped + bad_acceptances
    frame = records_frame(records, config.reference_points, acceptances)
    tracks = list(tracks) if tracks is not None else load_tracks()
    ref_tables, ref_errors = load_references(
        references_dir if references_dir is not None else DEFAULT_REFERENCES,
        plugins=references_dir is None,
    )  # the default site also shows installed plugins' tables
    refs = [v for t in ref_tables for v in t.values]
    built = [build_track(frame, t, refs, config.margin_baselines) for t in tracks]
    shown = set().union(*(t.cell_ids for t in built)) if built else set()
    untracked = sorted({r.cell_id for _, r in records} - shown)
    return SiteModel(
        records,
        skipped,
        frame,
        built,
        ref_tables,
        ref_errors,
        untracked,
        sources=[str(d) for d in results_dirs],
        config=config,
        summaries=build_summaries(frame, built, config),
        pairs={t.track.id: paper_pairs(t) for t in built},
        build=build_info(REPO, repo_url if repo_url is not None else config.repo_url),
        acceptances=acceptances,
    )


def build_summaries(
    frame: pd.DataFrame, tracks: Sequence[TrackTable], config: SiteConfig
) -> list[SummaryTable]:
    """One summary table per dataset that has a non-empty track, in the order tracks.yaml names the
    datasets."""
    row_configs = dict(zip(frame["row_key"], frame["row_config"])) if not frame.empty else {}
    datasets = list(dict.fromkeys(tt.track.dataset for tt in tracks if not tt.table.empty))
    return [
        build_summary(
            d,
            [tt for tt in tracks if tt.track.dataset == d],
            row_configs,
            list(config.reference_points),
        )
        for d in datasets
    ]


def margins_from_dirs(results: Sequence[Any], *, task: str, baseline: str) -> pd.DataFrame:
    """Per-seed paired margins over ``baseline`` of every record under ``results`` (``leaderboard
    margins``)."""
    records, _ = load_all(list(results))
    return paired_margins(records_frame(records), task=task, baseline=baseline)


def slug(text: str) -> str:
    """A file-name-safe slug for any record-provided name (never trusted as a path)."""
    import hashlib

    clean = re.sub(r"[^a-z0-9_.-]+", "-", str(text).lower()).strip("-.")[:40]
    if clean and clean == str(text):
        return clean
    return f"{clean or 'x'}-{hashlib.sha256(str(text).encode()).hexdigest()[:8]}"
