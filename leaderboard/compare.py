"""The compare page: a reader picks two method configurations and sees their paired difference on
every track and partition where both have a complete cell. Pure functions over the track tables;
no I/O.

Every difference is :func:`leaderboard.stats.difference` (paired over seeds when the two cells share
their seeds, Welch's interval otherwise), the test the index's verdicts and the track pages' noise
groups use, so the compare page never gives another verdict for the same pair. The page is static
and works from ``file://``: every pair's numbers are computed here and written into the page as
inline JSON (no request for data), and ``static/compare.js`` only picks the pair to show.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from leaderboard import stats
from leaderboard.formatting import entry_file, method_file, partition_words
from leaderboard.headline import headline

# the decimals written into the page's data (the page shows two)
DIGITS = 4


def _label(r: Mapping[str, Any]) -> str:
    return f"{r['method']} ({r['variant']})" if r.get("variant") else str(r["method"])


def _round(x: float) -> float | None:
    return round(float(x), DIGITS) if math.isfinite(float(x)) else None


def compare_data(tracks: Sequence[Any]) -> dict[str, Any]:
    """``configs`` (every method configuration with a complete cell on a track that is a result),
    ``columns`` (one per track and partition with a complete cell), ``cells`` (config index →
    column index → its mean and entry page) and ``pairs`` ("i,j" with i < j → one difference per
    column both have: [column, i − j, interval low, high, paired, n])."""
    configs: dict[str, dict[str, Any]] = {}
    columns: list[dict[str, Any]] = []
    cells: dict[tuple[str, int], Mapping[str, Any]] = {}
    for tt in tracks:
        if not tt.track.result or tt.table.empty:
            continue
        done = tt.table[tt.table["status"] == "complete"]
        for label in dict.fromkeys(done["partition_label"]):
            rows = done[done["partition_label"] == label].to_dict("records")
            col = len(columns)
            columns.append(_column(tt, label, rows))
            for r in rows:
                # one configuration across tracks (its label may name a variant on one track only)
                key = str(r["config_key"])
                known = configs.get(key)
                if known is None or (r.get("variant") and known["label"] == known["method"]):
                    configs[key] = {
                        "label": _label(r),
                        "method": str(r["method"]),
                        "method_file": method_file(r["method"]),
                        "reference": bool(r["reference"]),
                        # the columns where it leads / is the runner-up named, kept across tracks
                        "rank1": known["rank1"] if known else [],
                        "rank2": known.get("rank2", []) if known else [],
                    }
                cells[(key, col)] = r
            # the index's answer for this column names the pair: its leader and the runner-up the
            # verdict is about (tied runners-up: the one the test is least sure of, never the first
            # in table order)
            pair = _answer_pair(tt, done, label)
            if pair is not None:
                configs[pair[0]]["rank1"].append(col)
                configs[pair[1]]["rank2"].append(col)
    names = sorted(configs, key=lambda k: (configs[k]["label"], k))
    index = {n: i for i, n in enumerate(names)}
    pairs: dict[str, list[list[Any]]] = {}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            diffs = []
            for col in range(len(columns)):
                ra, rb = cells.get((a, col)), cells.get((b, col))
                if ra is None or rb is None:
                    continue
                d = stats.difference(ra["values"], ra["seeds"], rb["values"], rb["seeds"])
                diffs.append(
                    [col, _round(d.delta), _round(d.ci_low), _round(d.ci_high), d.paired, d.n]
                )
            if diffs:
                pairs[f"{i},{index[b]}"] = diffs
    return {
        "configs": [
            {k: v for k, v in configs[n].items() if k not in ("rank1", "rank2")} for n in names
        ],
        "leaders": _leaders(configs, names, len(columns)),
        "columns": columns,
        "cells": {
            f"{index[n]},{col}": {
                "mean": _round(r["mean"]),
                "entry": entry_file(r["entry_id"]),
                # what sets the cell apart from its pool (tables.pool_differences: backbone, data,
                # budget), kept where a reader compares
                "flag": str(r.get("differs") or ""),
                "backbone": str(r.get("backbone") or ""),
            }
            for (n, col), r in cells.items()
        },
        "pairs": pairs,
    }


def _column(tt: Any, label: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "track": tt.track.short,
        "track_file": f"{tt.track.id}.html",
        "dataset": tt.track.dataset,
        "partition": str(rows[0]["partition_short"]),
        "partition_full": str(label),
        "partition_words": partition_words(str(label)),
        "metric": tt.metric or "score",
        "higher": bool(tt.higher_is_better),
    }


def _answer_pair(tt: Any, done: Any, label: str) -> tuple[str, str] | None:
    """(leader, runner-up) config keys of the index's answer for one column, or None."""
    if not done[done["partition_label"] == label]["rank"].notna().any():
        return None
    h = headline(tt, label, [])
    if h.leader is None or h.runner_up is None:
        return None
    return str(h.leader["config_key"]), str(h.runner_up["config_key"])


def _leaders(configs: Mapping[str, Any], names: Sequence[str], n_columns: int) -> list[int]:
    """(rank 1, rank 2) of the first column with both, as config indices: the pair the index
    opens with."""
    for col in range(n_columns):
        first = [i for i, n in enumerate(names) if col in configs[n]["rank1"]]
        second = [i for i, n in enumerate(names) if col in configs[n]["rank2"]]
        if len(first) == 1 and second:
            return [first[0], second[0]]
    return []


def default_pair(data: Mapping[str, Any]) -> tuple[int, int] | None:
    """The pair shown before a reader picks one (and without JavaScript): the leader and the
    runner-up of the first pool that has both (the index's first answer), else the pair with the
    most columns in common, the first such in label order."""
    if data.get("leaders"):
        a, b = data["leaders"]
        return a, b
    best: tuple[int, int] | None = None
    most = 0
    for key, diffs in data["pairs"].items():
        if len(diffs) > most:
            i, j = (int(x) for x in key.split(","))
            best, most = (i, j), len(diffs)
    return best


def pair_rows(data: Mapping[str, Any], a: int, b: int) -> list[dict[str, Any]]:
    """The rows of the pair (a, b) as the page shows them: ``a − b`` on every column both have
    (sign flipped when a > b, the data holding i < j only)."""
    i, j, sign = (a, b, 1.0) if a < b else (b, a, -1.0)
    out = []
    for col, delta, low, high, paired, n in data["pairs"].get(f"{i},{j}", []):
        c = data["columns"][col]
        if sign < 0:
            low, high = (None if high is None else -high), (None if low is None else -low)
            delta = None if delta is None else -delta
        better = delta is not None and (delta > 0 if c["higher"] else delta < 0)
        within = low is None or high is None or low <= 0 <= high
        out.append(
            {
                **c,
                "delta": _signed(delta),
                "ci": "—" if low is None or high is None else f"[{_signed(low)}, {_signed(high)}]",
                "test": (f"paired over {n} seed{'s' if n != 1 else ''}" if paired else "Welch"),
                "verdict": "within noise" if within else "beyond noise",
                "ahead": "" if within else data["configs"][a if better else b]["label"],
                "a": data["cells"].get(f"{a},{col}"),
                "b": data["cells"].get(f"{b},{col}"),
                "flags": _flags(data, a, b, col),
            }
        )
    return out


def _flags(data: Mapping[str, Any], a: int, b: int, col: int) -> list[dict[str, str]]:
    """The not-like-for-like flags of the pair's two cells in one column: which side, its label and
    what differs (the same words as the track page's flags column)."""
    out = []
    for side, k in (("A", a), ("B", b)):
        cell = data["cells"].get(f"{k},{col}") or {}
        if cell.get("flag"):
            out.append({"side": side, "label": data["configs"][k]["label"], "why": cell["flag"]})
    return out


def _signed(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:+.2f}".replace("-", "−")
