"""The site's downloads: one CSV per track plus tracks, margins, summaries and ours-beside-the-papers
CSVs, and data.json. Text a spreadsheet would run as a formula is defused (:func:`csv_safe`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from leaderboard.build import SiteModel
from leaderboard.formatting import display_path
from leaderboard.summary import pairs_frame
from leaderboard.tables import TrackTable
from leaderboard.view_models import ref_view


def clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return clean(obj.item())
    return obj


_CSV_RISKY = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Text cells a spreadsheet would run as a formula (``=HYPERLINK(...)`` in a method name, also
    after leading spaces, tabs or line breaks) get a leading apostrophe; numbers are left alone.
    Lists and dicts are written as JSON. The writer quotes every field, so a carriage return inside
    a name cannot start a row."""

    def fix(v: Any) -> Any:
        if isinstance(v, (list, tuple, dict)):
            v = json.dumps(clean(v), sort_keys=True, default=str)
        if isinstance(v, str) and (
            v.startswith(_CSV_RISKY) or v.lstrip(" \t\r\n\f\v").startswith(_CSV_RISKY)
        ):
            return "'" + v
        return v

    return frame.apply(lambda col: col.map(fix)) if not frame.empty else frame


_TRACK_CSV = [
    "track",
    "method",
    "variant",
    "backbone",
    "method_version",
    "partition_short",
    "partition_label",
    "alpha",
    "partition_digest",
    "status",
    "n_seeds",
    "seeds",
    "values",
    "reported_values",
    "mean",
    "std",
    "ci_low",
    "ci_high",
    "rank",
    "noise_group",
    "reference",
    "fl_rounds",
    "fl_local_epochs",
    "client_steps",
    "client_samples",
    "differs",
    "bytes_per_client",
    "wall_time_s",
    "gpu_hours",
    "machines",
    "git_shas",
    "uses_public_data",
    "verified",
    "reevaluated",
    "traffic_underived",
    "cell_ids",
]


_INTEGERS = (
    "rank",
    "noise_group",
    "n_seeds",
    "n_diverged",
    "fl_rounds",
    "fl_local_epochs",
    "n",
    "positive",
    "rounds",
    "local_epochs",
    "ours_seeds",
)


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    frame = frame.copy()
    for col in _INTEGERS:
        if col in frame.columns:
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
    csv_safe(frame).to_csv(path, index=False, lineterminator="\n", quoting=csv.QUOTE_ALL)


def _track_frames(model: SiteModel) -> tuple[pd.DataFrame, pd.DataFrame]:
    tracks, margins = [], []
    for tt in model.tracks:
        tracks.append(tt.table.assign(track=tt.track.id).reindex(columns=_TRACK_CSV))
        if tt.margins is not None:
            margins.append(tt.margins.assign(track=tt.track.id, baseline=tt.track.baseline))
    cat = lambda fs: pd.concat(fs, ignore_index=True) if fs else pd.DataFrame()
    return cat(tracks), cat(margins)


def _summary_frame(model: SiteModel) -> pd.DataFrame:
    rows = []
    for st in model.summaries:
        for r in st.rows:
            for c, cell in zip(st.columns, r.cells):
                if cell is None:
                    continue
                rows.append(
                    {
                        "dataset": st.dataset,
                        "track": c.track_id,
                        "partition": c.partition_short,
                        "partition_label": c.partition_label,
                        "method": r.method,
                        "variant": r.variant,
                        "backbone": r.backbone,
                        "reference": r.reference,
                        "rounds": r.rounds,
                        "local_epochs": r.local_epochs,
                        "client_steps": cell.get("client_steps"),
                        "client_samples": cell.get("client_samples"),
                        "differs": cell.get("differs") or "",
                        "status": cell["status"],
                        "n_seeds": cell["n_seeds"],
                        "mean": cell["mean"],
                        "std": cell["std"],
                        "ci_low": cell["ci_low"],
                        "ci_high": cell["ci_high"],
                        "rank": cell["rank"],
                        "noise_group": cell["noise_group"],
                    }
                )
    return pd.DataFrame(rows)


def write_data(model: SiteModel, out: Path, ctx: ExportContext) -> None:
    """The site's downloads: csv/*.csv (tracks, margins, summaries, ours beside the papers', one
    file per track) and data.json."""
    tracks, margins = _track_frames(model)
    write_csv(out / "csv" / "tracks.csv", tracks)
    write_csv(out / "csv" / "margins.csv", margins)
    write_csv(out / "csv" / "summaries.csv", _summary_frame(model))
    pairs = [pairs_frame(p).assign(track=tid) for tid, p in model.pairs.items() if p]
    write_csv(
        out / "csv" / "paper-pairs.csv",
        pd.concat(pairs, ignore_index=True) if pairs else pd.DataFrame(),
    )
    for tt in model.tracks:
        write_csv(
            out / "csv" / f"{tt.track.id}.csv",
            tracks[tracks["track"] == tt.track.id] if not tracks.empty else tracks,
        )
    data = {
        "build": ctx.build,
        "tracks": [_track_data(tt, ctx.rows[tt.track.id]) for tt in model.tracks],
        "summaries": _summary_frame(model).to_dict("records"),
        "skipped": [
            {"path": display_path(s.path, ctx.sources), "reason": s.reason} for s in model.skipped
        ],
        "reference_errors": [
            {"path": display_path(p, ctx.sources), "reason": why}
            for p, why in model.reference_errors
        ],
        "untracked": model.untracked,
    }
    (out / "data.json").write_text(
        json.dumps(clean(data), indent=1, sort_keys=True, default=str, allow_nan=False) + "\n",
        encoding="utf-8",
    )


@dataclass(frozen=True)
class ExportContext:
    """What the downloads share with the pages: the build stamp, each track's formatted rows and
    the results folders (for relative paths)."""

    build: Mapping[str, Any]
    rows: Mapping[str, Sequence[Mapping[str, Any]]]
    sources: Sequence[str]


_ROW_KEYS = (
    "method",
    "method_version",
    "variant",
    "backbone",
    "config_key",
    "partition_label",
    "partition_short",
    "partition_digest",
    "alpha",
    "status",
    "n_seeds",
    "n_diverged",
    "seeds",
    "values",
    "mean",
    "std",
    "ci_low",
    "ci_high",
    "rank",
    "noise_group",
    "reference",
    "bytes",
    "bytes_per_client",
    "wall_time_s",
    "gpu_hours",
    "fl_rounds",
    "fl_local_epochs",
    "client_steps",
    "client_samples",
    "differs",
    "machines",
    "uses_public_data",
    "verified",
    "reevaluated",
    "traffic_underived",
    "cell_ids",
    "entry_id",
)


def _track_data(tt: TrackTable, rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    t = tt.track
    return {
        "id": t.id,
        "title": t.title,
        "label": t.short,
        "dataset": t.dataset,
        "task": t.task,
        "card": tt.card_name,
        "card_id": tt.card_id,
        "metric": tt.metric,
        "higher_is_better": tt.higher_is_better,
        "min_seeds": t.min_seeds,
        "rows": [{k: r[k] for k in _ROW_KEYS} for r in rows],
        "references": [
            {**ref_view(x["ref"]), "comparable": x["comparable"], "would_rank": x["would_rank"]}
            for x in tt.references
        ],
    }
