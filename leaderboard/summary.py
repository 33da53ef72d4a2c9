"""Track tables → per-dataset summary tables and "ours beside the paper's" pairs (docs/design.md
§1.2). Pure pandas, no I/O.

A summary table has one row per method configuration (rounds and local epochs included) and one
column per (track, partition) of one dataset: the track fixes the task, protocol card and
federation, so a column never mixes cards or partitions. Its cells are the track tables' cells, with
their ranks and "within noise" groups: nothing is recomputed here, only arranged. Reference points
(random init, central training, ...) are rows apart, never ranked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from leaderboard.labels import variant_labels


@dataclass(frozen=True)
class SummaryColumn:
    track_id: str
    track_label: str
    partition_label: str
    partition_short: str
    alpha: float | None
    metric: str | None
    higher_is_better: bool
    min_seeds: int
    n_ranked: int  # complete, ranked cells in this column: "best" needs two or more


@dataclass
class SummaryRow:
    method: str
    variant: str
    row_key: str
    reference: bool
    backbone: str
    rounds: Any
    local_epochs: Any
    # aligned with the columns: a track-table row, or None (not run)
    cells: list[dict[str, Any] | None]
    mean_rank: float | None = None
    n_ranked: int = 0
    # columns where two track rows share this summary row
    several: list[int] = field(default_factory=list)


@dataclass
class SummaryTable:
    dataset: str
    columns: list[SummaryColumn]
    rows: list[SummaryRow]  # ranked methods first (by mean rank), then reference points
    # the columns the mean rank averages over (see shared_columns)
    shared: list[int] = field(default_factory=list)


def _columns(tables: Sequence[Any]) -> list[tuple[Any, SummaryColumn]]:
    out = []
    for tt in tables:
        table = tt.table
        if table.empty:
            continue
        ranked = table[table["rank"].notna()]
        for part in table.drop_duplicates("partition_label").itertuples():
            n = int((ranked["partition_label"] == part.partition_label).sum())
            out.append(
                (
                    tt,
                    SummaryColumn(
                        track_id=tt.track.id,
                        track_label=tt.track.short,
                        partition_label=part.partition_label,
                        partition_short=part.partition_short,
                        alpha=part.alpha,
                        metric=tt.metric,
                        higher_is_better=tt.higher_is_better,
                        min_seeds=tt.track.min_seeds,
                        n_ranked=n,
                    ),
                )
            )
    return out


def build_summary(
    dataset: str,
    tables: Sequence[Any],
    row_configs: Mapping[str, str],
    reference_order: Sequence[str] = (),
) -> SummaryTable:
    """``tables``: the dataset's TrackTables; ``row_configs``: row_key → its configuration (JSON),
    used to label a method's several configurations readably."""
    cols = _columns(tables)
    rows: dict[tuple[str, str], SummaryRow] = {}
    for ci, (tt, col) in enumerate(cols):
        part = tt.table[tt.table["partition_label"] == col.partition_label]
        for r in part.to_dict("records"):
            # a "missing" row of a method run in several configurations
            if not isinstance(r["row_key"], str):
                continue
            row = rows.get((r["method"], r["row_key"]))
            if row is None:
                row = rows[(r["method"], r["row_key"])] = _new_row(r, len(cols), row_configs)
            if row.cells[ci] is None:
                row.cells[ci] = r
            else:
                row.several.append(ci)
    _label_variants(rows.values(), row_configs)
    shared = shared_columns(
        [r.cells for r in rows.values() if not r.reference], [c for _, c in cols]
    )
    for row in rows.values():
        ranks = [row.cells[i]["rank"] for i in shared if row.cells[i] is not None]
        ranks = [r for r in ranks if r is not None]
        row.n_ranked = len(ranks)
        complete = bool(ranks) and len(ranks) == len(shared)
        row.mean_rank = math.fsum(ranks) / len(ranks) if complete else None
    order = {m: i for i, m in enumerate(reference_order)}
    ranked = sorted(
        (r for r in rows.values() if not r.reference),
        key=lambda r: (
            r.mean_rank if r.mean_rank is not None else math.inf,
            -r.n_ranked,
            r.method,
            r.variant,
        ),
    )
    refs = sorted(
        (r for r in rows.values() if r.reference),
        key=lambda r: (order.get(r.method, len(order)), r.method, r.variant),
    )
    return SummaryTable(
        dataset=dataset, columns=[c for _, c in cols], rows=ranked + refs, shared=shared
    )


def shared_columns(
    rows: Sequence[Sequence[Mapping[str, Any] | None]], columns: Sequence[SummaryColumn]
) -> list[int]:
    """The columns a mean rank may average over: ranked among two or more cells (a rank 1 of 1 says
    nothing), and ranked for every method row that is ranked in any such column. A mean over other
    column sets would compare a method's 4 columns with another's 6."""

    def ranked(cells: Sequence[Mapping[str, Any] | None], i: int) -> bool:
        return cells[i] is not None and cells[i].get("rank") is not None

    contested = [i for i, c in enumerate(columns) if c.n_ranked >= 2]
    rankers = [cells for cells in rows if any(ranked(cells, i) for i in contested)]
    return [i for i in contested if all(ranked(cells, i) for cells in rankers)]


def _new_row(r: Mapping[str, Any], n_columns: int, row_configs: Mapping[str, str]) -> SummaryRow:
    config = json.loads(row_configs.get(r["row_key"], "{}"))
    fl = config.get("fl") or {}
    return SummaryRow(
        method=r["method"],
        variant="",
        row_key=r["row_key"],
        reference=bool(r["reference"]),
        backbone=str((config.get("backbone") or {}).get("name") or ""),
        rounds=fl.get("rounds"),
        local_epochs=fl.get("local_epochs"),
        cells=[None] * n_columns,
    )


def _label_variants(rows: Any, row_configs: Mapping[str, str]) -> None:
    by_method: dict[str, list[SummaryRow]] = {}
    for row in rows:
        by_method.setdefault(row.method, []).append(row)
    for group in by_method.values():
        labels = variant_labels(
            {r.row_key: json.loads(row_configs.get(r.row_key, "{}")) for r in group}
        )
        for r in group:
            r.variant = labels[r.row_key]


def best_marks(cell: Mapping[str, Any] | None, column: SummaryColumn) -> tuple[bool, bool]:
    """(best, within noise of the best) for a summary cell: the one best of its pool (``best``, set
    by ``build.rank_table``: a tie for first has none), or noise group 1, among two or more ranked
    cells of its column; reference points and unranked cells are neither."""
    if cell is None or cell.get("rank") is None or column.n_ranked < 2:
        return False, False
    return bool(cell.get("best")), cell.get("noise_group") == 1


# ----------------------------------------------------------------------------------------------------
# paper


def paper_pairs(tt: Any) -> list[dict[str, Any]]:
    """Ours beside the paper's: for every paper-reported number of a method we implement, on the
    track's protocol card (same card name) and not selected on the test set, our row(s) at the same
    α with Δ = ours − reported and Δ's interval (our t-interval shifted by the reported number). Δ
    is given only when our cell is complete and the paper's card id is ours (the same protocol
    exactly); otherwise ``why`` says what is missing."""
    card = tt.track.card or tt.card_name
    out: list[dict[str, Any]] = []
    for x in tt.references:
        ref = x["ref"]
        if ref.method is None or ref.selects_on_test or ref.card != card:
            continue
        alpha = x["alpha"]
        ours = tt.table[
            (tt.table["method"] == ref.method)
            & tt.table["status"].isin(["complete", "incomplete"])
            & tt.table["alpha"].map(lambda a, alpha=alpha: _same_alpha(a, alpha))
        ]
        if ours.empty:
            out.append(
                {
                    "ref": ref,
                    "alpha": alpha,
                    "ours": None,
                    "delta": None,
                    "delta_low": None,
                    "delta_high": None,
                    "why": "no record of ours on this setting yet",
                }
            )
        for r in ours.to_dict("records"):
            out.append({"ref": ref, "alpha": alpha, "ours": r, **_delta(r, ref, tt)})
    return out


def _same_alpha(a: Any, b: Any) -> bool:
    return isinstance(a, float) and isinstance(b, float) and not math.isnan(a) and a == b


def _delta(r: Mapping[str, Any], ref: Any, tt: Any) -> dict[str, Any]:
    none = {"delta": None, "delta_low": None, "delta_high": None}
    if ref.unit not in ("percent", "fraction"):
        return {**none, "why": f"the paper's unit is {ref.unit}"}
    if not (tt.card_id and ref.card_id == tt.card_id):
        return {
            **none,
            "why": "the paper's card id is not ours: same protocol name, other settings",
        }
    if r["status"] != "complete":
        return {**none, "why": f"ours has {r['n_seeds']} of {tt.track.min_seeds} seeds"}
    rep = ref.percent
    low, high = r["ci_low"], r["ci_high"]
    finite = isinstance(low, float) and math.isfinite(low)
    return {
        "delta": r["mean"] - rep,
        "delta_low": low - rep if finite else None,
        "delta_high": high - rep if finite else None,
        "why": "",
    }


def pairs_frame(pairs: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The pairs as a flat table (for CSV downloads)."""
    rows = []
    for p in pairs:
        ref, ours = p["ref"], p["ours"] or {}
        rows.append(
            {
                "method": ref.method,
                "variant": ours.get("variant", ""),
                "source": ref.source,
                "table": ref.table,
                "row": ref.row,
                "column": ref.column,
                "alpha": p["alpha"],
                "reported": ref.percent,
                "ours_mean": ours.get("mean"),
                "ours_ci_low": ours.get("ci_low"),
                "ours_ci_high": ours.get("ci_high"),
                "ours_seeds": ours.get("n_seeds"),
                "delta": p["delta"],
                "delta_ci_low": p["delta_low"],
                "delta_ci_high": p["delta_high"],
                "note": p["why"],
            }
        )
    return pd.DataFrame(rows)
