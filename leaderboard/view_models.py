"""Tables → view models: the dictionaries the templates read, with every number already
formatted (track rows, plot points, margins, ours beside the paper's, the answers, the summary
tables, the results changelog). Pure functions of :class:`leaderboard.build.SiteModel`; no I/O.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.records.reference import ReferenceValue
from benchmark.records.schema import ResultRecord
from leaderboard.build import SiteModel
from leaderboard.formatting import (
    alpha_sort,
    cell_file,
    ci_text,
    commit_url,
    dataset_file,
    entry_file,
    finite,
    fmt_alpha,
    fmt_budget,
    fmt_bytes,
    fmt_compute,
    method_file,
    num,
    partition_file,
    settings_text,
    short_source,
    signed,
    slug,
    steps_words,
    valid_alpha,
)
from leaderboard.headline import Headline, MarginCell, dataset_headlines
from leaderboard.margins import margin_rows
from leaderboard.plots import MIN_ALPHAS, Point, alpha_plot, alpha_settings, comm_plot
from leaderboard.summary import SummaryTable, best_marks
from leaderboard.tables import TrackTable


def ref_view(ref: ReferenceValue) -> dict[str, Any]:
    return {
        **{
            k: getattr(ref, k)
            for k in (
                "source",
                "table",
                "file",
                "row",
                "column",
                "method",
                "card",
                "card_id",
                "selection",
                "metric",
                "unit",
                "mean",
                "std",
                "uncertain",
            )
        },
        "display": ref.display,
        "percent": ref.percent,
        "settings_text": settings_text(ref.settings),
        "cite": short_source(ref.source),
        "anchor": slug(Path(ref.file).stem) if ref.file else "",
    }


def ref_dataset(v: ReferenceValue) -> str:
    """The dataset a paper's number is on: its settings' ``dataset``, else the dataset it is
    evaluated on (``eval_dataset``, the transfer and fine-tuning tables: FedMAE, Dec-SSL, FLESD) with
    the one it was pre-trained on beside it when that differs; "—" when none is stated."""
    settings = v.settings
    if settings.get("dataset"):
        return str(settings["dataset"])
    evaluated, pretrained = settings.get("eval_dataset"), settings.get("pretrain_dataset")
    if evaluated and pretrained and evaluated != pretrained:
        return f"{evaluated} (pre-trained on {pretrained})"
    return str(evaluated or pretrained or "—")


def mean_ci_text(r: Mapping[str, Any]) -> tuple[str, str]:
    """(value text, CI text) of a track row."""
    values = r["values"] or []
    if r["status"] == "complete":
        std = "" if not finite(r["std"]) else f" ± {r['std']:.2f}"
        ci = f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]" if finite(r["ci_low"]) else "—"
        return f"{r['mean']:.2f}{std}", ci
    if r["status"] == "missing":
        return "missing", "—"
    if values:
        return "incomplete: " + ", ".join(f"{v:.2f}" for v in values), "—"
    return ("diverged" if r["n_diverged"] else "no score"), "—"


def track_rows(tt: TrackTable, seeds_of: Mapping[str, int]) -> list[dict[str, Any]]:
    rows = []
    for r in tt.table.to_dict("records"):
        mean_text, ci = mean_ci_text(r)
        compute_text, compute_sort = fmt_compute(r["gpu_hours"], r["wall_time_s"])
        rows.append(
            {
                **r,
                "mean_text": mean_text,
                "mean_sort": num(r["mean"], ".10g"),
                "ci_text": ci,
                "reported_text": ", ".join(f"{v:.2f}" for v in r.get("reported_values") or []),
                "alpha_text": fmt_alpha(r["alpha"]),
                "alpha_sort": alpha_sort(r["alpha"]),
                "partition_file": partition_file(tt.track.dataset, r["partition_label"]),
                "bytes_text": fmt_bytes(r["bytes_per_client"]),
                # a row whose traffic nobody derived is not ranked on communication
                "bytes_sort": ""
                if r.get("traffic_underived")
                else num(r["bytes_per_client"], ".0f"),
                "compute_text": compute_text,
                "compute_sort": compute_sort,
                "machine_text": ", ".join(r["machines"] or []),
                "budget_text": (
                    fmt_budget(r["fl_rounds"], r["fl_local_epochs"])
                    if _trains([r])
                    else "no training"
                ),
                "steps_text": steps_words(r["client_steps"], r["client_samples"]),
                "budget_sort": num(r["client_steps"], ".0f"),
                "method_file": method_file(r["method"]),
                "entry_file": entry_file(r["entry_id"]) if r["entry_id"] else None,
                "digest_short": (r["partition_digest"] or "")[:8],
                "cells": sorted(
                    ({"file": cell_file(c), "seed": seeds_of.get(c, -1)} for c in r["cell_ids"]),
                    key=lambda c: c["seed"],
                ),
            }
        )
    return rows


def record_rows(frame: Any) -> list[dict[str, Any]]:
    return [
        {
            "cell_id": x["cell_id"],
            "file": cell_file(x["cell_id"]),
            "method": x["method"],
            "card": x["card_name"],
            "card_id": x["card_id"],
            "value": f"{x['value']:.2f}" if finite(x["value"]) else "—",
        }
        for x in frame.to_dict("records")
    ]


def row_label(r: Mapping[str, Any]) -> str:
    return f"{r['method']} ({r['variant']})" if r.get("variant") else str(r["method"])


def _point(r: Mapping[str, Any], x: float, metric: str | None) -> Point | None:
    if r["status"] == "complete":
        y, err, hollow = r["mean"], (r["std"] if finite(r["std"]) else None), False
    elif r["status"] == "incomplete" and finite(r["partial_mean"]):
        y, err, hollow = r["partial_mean"], None, True
    else:
        return None
    seeds = f"{r['n_seeds']} seed{'s' if r['n_seeds'] != 1 else ''}" + (
        " (incomplete)" if hollow else ""
    )
    title = (
        f"{row_label(r)} · {r['partition_short']} · {metric or 'score'} {y:.2f}"
        + (f" ± {err:.2f}" if err else "")
        + f" · {fmt_bytes(r['bytes_per_client'])} per client"
        + (" (traffic not derived)" if r.get("traffic_underived") else "")
        + f" · {seeds}"
    )
    return Point(
        series=row_label(r),
        x=x,
        y=y,
        title=title,
        href=f"../entries/{entry_file(r['entry_id'])}",
        hollow=hollow,
        err=err,
        reference=bool(r["reference"]),
        partition=str(r["partition_short"]),
    )


def track_plots(tt: TrackTable, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    y_label = f"{tt.metric or 'score'}, mean ± std over seeds"
    comm = [
        p
        for r in rows
        if finite(r["bytes_per_client"]) and (p := _point(r, r["bytes_per_client"], tt.metric))
    ]
    het = [
        p
        for r in rows
        if valid_alpha(r["alpha"]) and (p := _point(r, float(r["alpha"]), tt.metric))
    ]
    settings = [fmt_alpha(a) for a in alpha_settings(het)]
    return {
        "comm": comm_plot(comm, y_label, fmt_bytes),
        "alpha": alpha_plot(het, y_label),
        # fewer than MIN_ALPHAS settings: no heterogeneity plot, and the page says why
        "alpha_settings": settings,
        "min_alphas": MIN_ALPHAS,
    }


def margin_view(tt: TrackTable, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    if tt.margins is None:
        return None
    by_key = {(r["config_key"], r["partition_label"]): r for r in rows if r["entry_file"]}
    out = []
    for view, (_, m) in zip(margin_rows(tt.margins), tt.margins.iterrows()):
        row = by_key.get((m["config_key"], m["partition_label"]))
        out.append(
            {
                **view,
                "entry_file": row["entry_file"] if row else None,
                "partition": row["partition_short"] if row else view["partition"],
                "partition_label": m["partition_label"],
            }
        )
    return out


def pair_view(pairs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in pairs:
        ours = p["ours"]
        view = {
            "ref": ref_view(p["ref"]),
            "alpha_text": fmt_alpha(p["alpha"]),
            "why": p["why"],
            "ours": None,
            "delta": signed(p["delta"]),
            "delta_ci": "",
        }
        if ours is not None:
            mean_text, ci = mean_ci_text(ours)
            view["ours"] = {
                "label": row_label(ours),
                "text": mean_text,
                "ci": ci,
                "entry_file": entry_file(ours["entry_id"]),
                "status": ours["status"],
            }
        if finite(p["delta_low"]):
            view["delta_ci"] = f"[{signed(p['delta_low'])}, {signed(p['delta_high'])}]"
        out.append(view)
    return out


def _margin_cell(m: MarginCell | None) -> dict[str, Any]:
    if m is None:
        return {
            "text": "—",
            "ci": "no partner of the same seed and backbone",
            "noise": False,
            "sort": "",
        }
    return {
        "text": signed(m.margin),
        "ci": ci_text(m.ci_low, m.ci_high),
        "noise": m.within_noise,
        "sort": num(m.margin, ".10g"),
        "n": m.n,
    }


def _brief(r: Mapping[str, Any]) -> dict[str, Any]:
    """A row named in an answer's sentences: label, links and mean."""
    return {
        "label": row_label(r),
        "method": r["method"],
        "method_file": method_file(r["method"]),
        "entry_file": entry_file(r["entry_id"]),
        "mean": f"{r['mean']:.2f}",
    }


def _beats_every(ref: Mapping[str, Any], h: Headline) -> bool:
    """A reference point whose mean is better than every ranked method's of its pool."""
    means = [x.row["mean"] for x in h.lines]
    if not h.higher_is_better:
        return all(ref["mean"] < m for m in means)
    return all(ref["mean"] > m for m in means)


def headline_view(h: Headline) -> dict[str, Any]:
    """One pool's answer, formatted: leader, Δ to the runner-up (or "tie"), and each ranked method's
    margins."""
    view: dict[str, Any] = {
        "track": h.track_label,
        "track_file": f"{h.track_id}.html",
        "partition": h.partition_short,
        "partition_full": h.partition_label,
        "metric": h.metric or "score",
        "tie": h.tie,
        "leader": None,
        "runner": None,
        "delta": None,
        "baselines": list(h.baselines),
    }
    if h.leader is not None:
        view["leader"] = {
            "label": row_label(h.leader),
            "method_file": method_file(h.leader["method"]),
            "entry_file": entry_file(h.leader["entry_id"]),
            "mean": f"{h.leader['mean']:.2f}",
            "differs": h.leader.get("differs") or "",
        }
    view["like_for_like"] = _brief(h.like_for_like) if h.like_for_like is not None else None
    view["references"] = [_brief(r) for r in h.references]
    view["above_all"] = [
        r["label"]
        for r, raw in zip(view["references"], h.references)
        if h.lines and _beats_every(raw, h)
    ]
    if h.runner_up is not None and h.delta is not None:
        d = h.delta
        view["runner"] = {
            "label": row_label(h.runner_up),
            "entry_file": entry_file(h.runner_up["entry_id"]),
        }
        # runners-up tied on one mean are named together: the verdict is the one least sure of
        # the lead (leaderboard.headline), whatever their order
        view["runners"] = [
            {"label": row_label(r), "entry_file": entry_file(r["entry_id"])}
            for r in (h.runners_up or (h.runner_up,))
        ]
        how = (
            f"paired over {d.n} seed{'s' if d.n != 1 else ''}"
            if d.paired
            else "Welch interval: the two cells have different seeds"
        )
        view["delta"] = {
            "text": signed(d.delta),
            "ci": ci_text(d.ci_low, d.ci_high),
            "how": how,
            "verdict": "within noise" if d.within_noise else "beyond noise",
        }
    view["also_within"] = [
        {"label": row_label(r), "entry_file": entry_file(r["entry_id"])} for r in h.also_within
    ]
    view["lines"] = [
        {
            "label": row_label(x.row),
            "method": x.row["method"],
            "method_file": method_file(x.row["method"]),
            "entry_file": entry_file(x.row["entry_id"]),
            "rank": x.row["rank"],
            "mean": f"{x.row['mean']:.2f}",
            "sort": num(x.row["mean"], ".10g"),
            "differs": x.row.get("differs") or "",
            "best": bool(x.row.get("best")),
            "margins": [_margin_cell(m) for m in x.margins],
        }
        for x in h.lines
    ]
    return view


def answers(model: SiteModel) -> list[dict[str, Any]]:
    """Per dataset with a ranked cell on a track that is a result: its headlines, in tracks.yaml's
    order."""
    out = []
    for dataset in dict.fromkeys(tt.track.dataset for tt in model.tracks):
        # a track marked `result: false` (the smoke grid's pipeline check) has no leader to name
        tables = [tt for tt in model.tracks if tt.track.dataset == dataset and tt.track.result]
        hs = dataset_headlines(tables, model.config.margin_baselines)
        if hs:
            views = [headline_view(h) for h in hs]
            # what each reference point is, beside its number (the pixels row above every method)
            for v, h in zip(views, hs):
                for ref, raw in zip(v["references"], h.references):
                    ref["what"] = model.config.reference_points.get(str(raw["method"]), "")
            out.append({"dataset": dataset, "file": dataset_file(dataset), "headlines": views})
    return out


def summary_view(st: SummaryTable) -> dict[str, Any]:
    """A summary table ready for its template: column groups per track, and per row the formatted
    cells."""
    cols = [
        {
            "short": c.partition_short,
            "full": c.partition_label,
            "track": c.track_label,
            "file": partition_file(st.dataset, c.partition_label),
            "higher": c.higher_is_better,
            "col": i + 3,
        }
        for i, c in enumerate(st.columns)
    ]
    rows = [_summary_row(r, st.columns) for r in st.rows]
    return {
        "dataset": st.dataset,
        "file": dataset_file(st.dataset),
        "groups": _column_groups(st),
        "columns": cols,
        **_summary_filters(st),
        "ranked": [r for r in rows if not r["reference"]],
        "references": [r for r in rows if r["reference"]],
        "n_columns": len(cols),
        "mean_rank_note": _mean_rank_note(st),
    }


def _column_groups(st: SummaryTable) -> list[dict[str, Any]]:
    """The summary's column groups: one per track, spanning its partitions."""
    groups: list[dict[str, Any]] = []
    for c in st.columns:
        if not groups or groups[-1]["track_id"] != c.track_id:
            groups.append(
                {
                    "track_id": c.track_id,
                    "label": c.track_label,
                    "file": f"{c.track_id}.html",
                    "span": 0,
                }
            )
        groups[-1]["span"] += 1
    return groups


def _summary_row(r: Any, columns: Sequence[Any]) -> dict[str, Any]:
    backbone = _backbone_of(r)
    cells = [
        {
            **_summary_cell(cell, col, i in r.several),
            "f_task": col.track_label,
            "f_partition": col.partition_short,
        }
        for i, (cell, col) in enumerate(zip(r.cells, columns))
    ]
    return {
        "method": r.method,
        "method_file": method_file(r.method),
        "reference": r.reference,
        "variant": r.variant if r.variant != backbone else "",
        "backbone": backbone,
        "budget": _row_budget(r),
        "budget_detail": _row_steps(r),
        "differs": _row_differs(r),
        "cells": cells,
        "mean_rank": f"{r.mean_rank:.1f}" if r.mean_rank is not None else "—",
        "mean_rank_sort": num(r.mean_rank, ".6g"),
        "n_ranked": r.n_ranked,
    }


def _mean_rank_note(st: SummaryTable) -> str:
    """Which columns the mean rank averages over, in words."""
    shared = [f"{st.columns[i].track_label} {st.columns[i].partition_short}" for i in st.shared]
    left = len(st.columns) - len(shared)
    plural = "s" if len(shared) != 1 else ""
    note = (
        f"mean rank over the {len(shared)} column{plural} every ranked method shares "
        f"({', '.join(shared)})"
        if shared
        else "no column is shared by every ranked method: no mean rank"
    )
    if shared and left:
        note += (
            f"; {left} other column{'s' if left != 1 else ''} (ranked among fewer than two "
            "methods, or not run by every method) do not count"
        )
    return note


def _summary_filters(st: SummaryTable) -> dict[str, Any]:
    """The filter bar of a summary page: its tasks, partitions and methods, each with its page."""
    filters = {
        "task": list(dict.fromkeys(c.track_label for c in st.columns)),
        "partition": list(dict.fromkeys(c.partition_short for c in st.columns)),
        "method": list(dict.fromkeys(r.method for r in st.rows)),
    }
    links = {
        "task": {c.track_label: f"tracks/{c.track_id}.html" for c in st.columns},
        "partition": {
            c.partition_short: f"partitions/{partition_file(st.dataset, c.partition_label)}"
            for c in st.columns
        },
        "method": {r.method: f"methods/{method_file(r.method)}" for r in st.rows},
    }
    return {"filters": filters, "filter_links": links}


def _trains(cells: Iterable[Mapping[str, Any] | None]) -> bool:
    """False when every cell of a row ran no optimizer step (random init): it has no training budget
    to show."""
    steps = [c.get("client_steps") for c in cells if c is not None and c.get("status") != "missing"]
    return not steps or any(not finite(x) or x > 0 for x in steps)


def _row_budget(r: Any) -> str:
    return fmt_budget(r.rounds, r.local_epochs) if _trains(r.cells) else "no training"


def _row_steps(r: Any) -> str:
    """A summary row's step and sample budgets: the median over the cells it has (one pre-training
    serves every task column, so they agree)."""
    cells = [c for c in r.cells if c is not None and c.get("status") != "missing"]

    def median(key: str) -> float:
        values = sorted(float(c[key]) for c in cells if finite(c.get(key)) and c[key] > 0)
        return values[len(values) // 2] if values else math.nan

    return steps_words(median("client_steps"), median("client_samples"))


def _row_differs(r: Any) -> str:
    """What sets a summary row apart in the columns it is ranked in (the tracks' flags, once each)."""
    flags = [c.get("differs") for c in r.cells if c is not None and c.get("differs")]
    return "; ".join(dict.fromkeys(flags))


def _backbone_of(r: Any) -> str:
    return r.backbone or ""


def _summary_cell(cell: Mapping[str, Any] | None, col: Any, several: bool) -> dict[str, Any]:
    if cell is None:
        return {"kind": "none"}
    best, near = best_marks(cell, col)
    base = {
        "entry_file": entry_file(cell["entry_id"]) if cell["entry_id"] else None,
        "best": best,
        "near": near and not best,
        "several": several,
        "rank": cell["rank"],
        "track_file": f"{col.track_id}.html",
        "title": f"{row_label(cell)} · {col.track_label} · {cell['partition_label']}",
    }
    if cell["status"] == "complete":
        std = f"±{cell['std']:.2f}" if finite(cell["std"]) else ""
        return {
            **base,
            "kind": "value",
            "text": f"{cell['mean']:.2f}",
            "std": std,
            "sort": num(cell["mean"], ".10g"),
        }
    if cell["status"] == "incomplete" and finite(cell["partial_mean"]):
        return {
            **base,
            "kind": "partial",
            "text": f"{cell['partial_mean']:.2f}",
            "sort": "",
            "std": f"{cell['n_seeds']}/{col.min_seeds} seeds",
        }
    return {
        **base,
        "kind": "text",
        "text": cell["status"] if cell["status"] != "incomplete" else "no score",
        "sort": "",
    }


def track_rows_for(tt: TrackTable, method: str) -> list[dict[str, Any]]:
    out = []
    for r in track_rows(tt, {}):
        if r["method"] == method:
            out.append(
                {
                    "partition": r["partition_short"],
                    "partition_full": r["partition_label"],
                    "variant": r["variant"],
                    "value": r["mean_text"],
                    "status": r["status"],
                    "seeds": f"{r['n_seeds']}/{tt.track.min_seeds}",
                    "entry_file": r["entry_file"],
                    "sort": r["mean_sort"],
                    "rank": r["rank"] if r["rank"] is not None else "—",
                    # a rank is shown with the flag that qualifies it (tables.pool_differences)
                    "differs": (r["differs"] or "") if r["rank"] is not None else "",
                }
            )
    return out


def track_filters(
    tracks: Sequence[TrackTable],
    track_files: Mapping[str, str],
    tt: TrackTable,
    rows: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The filter bar of a track page: its dataset's other tracks (links), its partitions and its
    methods."""
    siblings = [x for x in tracks if x.track.dataset == tt.track.dataset and not x.table.empty]
    values = {
        "task": [x.track.short for x in siblings],
        "partition": list(dict.fromkeys(r["partition_short"] for r in rows)),
        "method": list(dict.fromkeys(r["method"] for r in rows)),
    }
    links = {
        "task": {x.track.short: f"tracks/{track_files[x.track.id]}" for x in siblings},
        "partition": {r["partition_short"]: f"partitions/{r['partition_file']}" for r in rows},
        "method": {r["method"]: f"methods/{r['method_file']}" for r in rows},
    }
    return {"filter_values": values, "filter_links": links}


def results_changelog(model: SiteModel, summarized: Iterable[str]) -> list[dict[str, Any]]:
    """The records grouped by (day created, producing commit, dataset), newest first: what entered
    when."""
    groups: dict[tuple[str, str, str], list[ResultRecord]] = defaultdict(list)
    for _, r in model.records:
        day = str(r.created_at or "")[:10] or "undated"
        groups[(day, r.env.git_sha or "unknown", r.dataset)].append(r)
    repo_url, shown = model.build.get("repo_url", ""), set(summarized)
    out = []
    newest = sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1]), reverse=True)
    for (day, sha, dataset), recs in newest:
        methods = sorted({r.method for r in recs})
        out.append(
            {
                "date": day,
                "commit": sha,
                "commit_url": commit_url(sha, repo_url),
                "dataset": dataset,
                "n": len(recs),
                "dataset_file": dataset_file(dataset) if dataset in shown else None,
                "methods": [{"name": m, "file": method_file(m)} for m in methods],
                "seeds": ", ".join(str(s) for s in sorted({r.seed for r in recs})),
            }
        )
    return out
