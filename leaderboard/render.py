"""Tables → static HTML, SVG plots, data.json and CSV files (docs/design.md §1.2). Jinja2 with
autoescape on for every template; all numbers come from :mod:`leaderboard.build` and
:mod:`leaderboard.summary`; this module only formats them and writes files.

Every record-provided string reaches HTML through autoescaping, never through ``|safe`` (the one
exception is Markdown, rendered by :mod:`leaderboard.mdtext` with raw HTML escaped). Names used in
file names go through :func:`leaderboard.build.slug`; links taken from records are kept only for
http(s). No page shows an absolute local path: record files are named relative to the results folder
they were found in.
"""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import jinja2
import pandas as pd

from benchmark.core.canonical import to_plain
from benchmark.core.deviations import deviations as parse_deviations_of
from benchmark.records.reference import ReferenceValue
from benchmark.records.schema import ResultRecord
from leaderboard import mdtext
from leaderboard.build import VERIFIED_RUNNER, SiteModel, TrackTable, slug
from leaderboard.headline import Headline, MarginCell, dataset_headlines
from leaderboard.labels import fmt_alpha, round_stat
from leaderboard.margins import margin_rows
from leaderboard.papers import MethodPapers, load_papers
from leaderboard.plots import Point, alpha_plot, comm_plot
from leaderboard.summary import SummaryTable, best_marks, pairs_frame

HERE = Path(__file__).resolve().parent
__all__ = ["deviations", "fmt_alpha", "fmt_bytes", "render_site", "safe_url", "wandb_url"]


# --------------------------------------------------------------------------------------------------
# formatting


def fmt_bytes(n: float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "—"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_compute(gpu_hours: float | None, wall_s: float | None) -> tuple[str, str]:
    if _finite(gpu_hours) and gpu_hours > 0:
        return f"{gpu_hours:.2f} GPU-h", f"{gpu_hours * 3600:.6g}"
    if _finite(wall_s):
        if wall_s < 3600:
            return f"{wall_s / 60:.1f} min (CPU wall)", f"{wall_s:.6g}"
        return f"{wall_s / 3600:.2f} h (CPU wall)", f"{wall_s:.6g}"
    return "—", ""


def fmt_wall(seconds: float) -> str:
    if not _finite(seconds):
        return "—"
    return (
        f"{seconds:.1f} s"
        if seconds < 120
        else (f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h")
    )


def fmt_budget(rounds: Any, epochs: Any, steps: Any = None) -> str:
    """``R=5 × E=2 · 200 steps``: rounds, local epochs per round and optimizer steps summed over
    clients."""
    parts = []
    if _finite(rounds):
        parts.append(f"R={int(rounds)}")
    if _finite(epochs):
        parts.append(f"E={int(epochs)}")
    text = " × ".join(parts) or "—"
    if _finite(steps) and steps > 0:
        text += f" · {steps:,.0f} steps"
    return text


def safe_url(url: Any) -> str | None:
    """Only absolute http(s) links from records become hrefs (a ``javascript:`` URL would run on
    click)."""
    if not isinstance(url, str):
        return None
    parsed = urlparse(url.strip())
    return url.strip() if parsed.scheme in ("http", "https") and parsed.netloc else None


def wandb_url(record: ResultRecord) -> str | None:
    t = record.tracking
    if t is None:
        return None
    if t.url:
        return safe_url(t.url)
    if t.backend == "wandb" and t.entity and t.project and t.run_id and t.mode == "online":
        return f"https://wandb.ai/{quote(t.entity, safe='')}/{quote(t.project, safe='')}/runs/{quote(t.run_id, safe='')}"
    return None


def commit_url(sha: Any, repo_url: str) -> str | None:
    """A link to a commit when the repository's URL is known (a build option) and the sha looks like
    one."""
    if (
        not repo_url
        or not safe_url(repo_url)
        or not isinstance(sha, str)
        or not re.fullmatch(r"[0-9a-f]{7,40}", sha)
    ):
        return None
    return f"{repo_url}/commit/{sha}"


def _valid_alpha(a: Any) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and not math.isnan(a)


def _alpha_sort(a: Any) -> str:
    if not _valid_alpha(a):
        return ""
    return "1e308" if math.isinf(a) else f"{a:g}"


def cell_file(cell_id: str) -> str:
    return f"{slug(cell_id)}.html"


def method_file(method: str) -> str:
    return f"{slug(method)}.html"


def entry_file(entry_id: str) -> str:
    return f"{slug(entry_id)}.html"


def partition_file(dataset: str, label: str) -> str:
    return f"{slug(f'{dataset}--{label}')}.html"


def dataset_file(dataset: str) -> str:
    return f"{slug(dataset)}.html"


def display_path(path: Path | str, sources: Sequence[str]) -> str:
    """A record file as ``<results folder name>/<path inside it>``: never an absolute local path."""
    path = Path(path)
    for src in sources:
        root = Path(src)
        try:
            rel = path.resolve().relative_to(root.resolve())
        except (ValueError, OSError):
            continue
        return str(Path(root.name or "results") / rel)
    return path.name


def _setting_value(v: Any) -> str:
    """A paper setting in words: ∞ for an unbounded number (``rounds: .inf``, one-shot methods),
    never ``inf``."""
    if isinstance(v, float) and math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if isinstance(v, str) and v.strip().lower() in ("inf", ".inf", "infinity"):  # YAML: bare inf
        return "∞"
    return str(v)


def _settings_text(settings: Any) -> str:
    """``k=v, ...``; a setting the paper does not state (None, NaN) is left out rather than printed
    as ``None``."""
    return ", ".join(
        f"{k}={_setting_value(v)}"
        for k, v in sorted(dict(settings).items())
        if v is not None and not (isinstance(v, float) and math.isnan(v))
    )


def short_source(source: str) -> str:
    """A paper's short citation: its last parenthesised part ("Lubana et al., ICML 2022"), else the
    whole title."""
    m = re.search(r"\(([^()]*(?:et al|,)[^()]*\d{4}[^()]*)\)\s*$", source)
    return m.group(1) if m else source


def _ref_dict(ref: ReferenceValue) -> dict[str, Any]:
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
        "settings_text": _settings_text(ref.settings),
        "cite": short_source(ref.source),
        "anchor": slug(Path(ref.file).stem) if ref.file else "",
    }


def _num(x: Any, spec: str = ".2f") -> str:
    return format(x, spec) if _finite(x) else ""


# --------------------------------------------------------------------------------------------------
# rows


def _mean_text(r: Mapping[str, Any]) -> tuple[str, str]:
    """(value text, CI text) of a track row."""
    values = r["values"] or []
    if r["status"] == "complete":
        std = "" if not _finite(r["std"]) else f" ± {r['std']:.2f}"
        ci = f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]" if _finite(r["ci_low"]) else "—"
        return f"{r['mean']:.2f}{std}", ci
    if r["status"] == "missing":
        return "missing", "—"
    if values:
        return "incomplete: " + ", ".join(f"{v:.2f}" for v in values), "—"
    return ("diverged" if r["n_diverged"] else "no score"), "—"


def track_rows(tt: TrackTable, seeds_of: Mapping[str, int]) -> list[dict[str, Any]]:
    rows = []
    for r in tt.table.to_dict("records"):
        mean_text, ci = _mean_text(r)
        compute_text, compute_sort = fmt_compute(r["gpu_hours"], r["wall_time_s"])
        rows.append(
            {
                **r,
                "mean_text": mean_text,
                "mean_sort": _num(r["mean"], ".10g"),
                "ci_text": ci,
                "reported_text": ", ".join(f"{v:.2f}" for v in r.get("reported_values") or []),
                "alpha_text": fmt_alpha(r["alpha"]),
                "alpha_sort": _alpha_sort(r["alpha"]),
                "partition_file": partition_file(tt.track.dataset, r["partition_label"]),
                "bytes_text": fmt_bytes(r["bytes_per_client"]),
                "bytes_sort": _num(r["bytes_per_client"], ".0f"),
                "compute_text": compute_text,
                "compute_sort": compute_sort,
                "machine_text": ", ".join(r["machines"] or []),
                "budget_text": (
                    fmt_budget(r["fl_rounds"], r["fl_local_epochs"])
                    if _trains([r])
                    else "no training"
                ),
                "steps_text": steps_words(r["client_steps"], r["client_samples"]),
                "budget_sort": _num(r["client_steps"], ".0f"),
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


def _record_rows(frame: Any) -> list[dict[str, Any]]:
    return [
        {
            "cell_id": x["cell_id"],
            "file": cell_file(x["cell_id"]),
            "method": x["method"],
            "card": x["card_name"],
            "card_id": x["card_id"],
            "value": f"{x['value']:.2f}" if _finite(x["value"]) else "—",
        }
        for x in frame.to_dict("records")
    ]


def _label(r: Mapping[str, Any]) -> str:
    return f"{r['method']} ({r['variant']})" if r.get("variant") else str(r["method"])


def _point(r: Mapping[str, Any], x: float, metric: str | None) -> Point | None:
    if r["status"] == "complete":
        y, err, hollow = r["mean"], (r["std"] if _finite(r["std"]) else None), False
    elif r["status"] == "incomplete" and _finite(r["partial_mean"]):
        y, err, hollow = r["partial_mean"], None, True
    else:
        return None
    seeds = f"{r['n_seeds']} seed{'s' if r['n_seeds'] != 1 else ''}" + (
        " (incomplete)" if hollow else ""
    )
    title = (
        f"{_label(r)} · {r['partition_short']} · {metric or 'score'} {y:.2f}"
        + (f" ± {err:.2f}" if err else "")
        + f" · {fmt_bytes(r['bytes_per_client'])} per client · {seeds}"
    )
    return Point(
        series=_label(r),
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
        if _finite(r["bytes_per_client"]) and (p := _point(r, r["bytes_per_client"], tt.metric))
    ]
    het = [
        p
        for r in rows
        if _valid_alpha(r["alpha"]) and (p := _point(r, float(r["alpha"]), tt.metric))
    ]
    return {"comm": comm_plot(comm, y_label, fmt_bytes), "alpha": alpha_plot(het, y_label)}


def _margin_view(tt: TrackTable, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
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


def _pair_view(pairs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in pairs:
        ours = p["ours"]
        view = {
            "ref": _ref_dict(p["ref"]),
            "alpha_text": fmt_alpha(p["alpha"]),
            "why": p["why"],
            "ours": None,
            "delta": _signed(p["delta"]),
            "delta_ci": "",
        }
        if ours is not None:
            mean_text, ci = _mean_text(ours)
            view["ours"] = {
                "label": _label(ours),
                "text": mean_text,
                "ci": ci,
                "entry_file": entry_file(ours["entry_id"]),
                "status": ours["status"],
            }
        if _finite(p["delta_low"]):
            view["delta_ci"] = f"[{_signed(p['delta_low'])}, {_signed(p['delta_high'])}]"
        out.append(view)
    return out


def _signed(x: Any) -> str:
    """``+1.23`` / ``−1.23`` (a true minus sign); a value that rounds to zero is ``0.00``, never
    ``−0.00``."""
    if not _finite(x):
        return ""
    return "0.00" if round(x, 2) == 0 else f"{x:+.2f}".replace("-", "−")


# ------------------------------------------------------------------------------------------ answers

BASELINE_NAMES = {"no_pretrain": "random init", "no_pretrain_bn": "calibrated random init"}


def baseline_name(method: str) -> str:
    """A reference point's name for readers ("random init"); other methods keep their registry
    name."""
    return BASELINE_NAMES.get(method, method)


def _ci(low: Any, high: Any) -> str:
    if _finite(low) and _finite(high):
        return f"[{_signed(low)}, {_signed(high)}]"
    return "no interval (one seed)"


def _margin_cell(m: MarginCell | None) -> dict[str, Any]:
    if m is None:
        return {
            "text": "—",
            "ci": "no partner of the same seed and backbone",
            "noise": False,
            "sort": "",
        }
    return {
        "text": _signed(m.margin),
        "ci": _ci(m.ci_low, m.ci_high),
        "noise": m.within_noise,
        "sort": _num(m.margin, ".10g"),
        "n": m.n,
    }


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
            "label": _label(h.leader),
            "method_file": method_file(h.leader["method"]),
            "entry_file": entry_file(h.leader["entry_id"]),
            "mean": f"{h.leader['mean']:.2f}",
        }
    if h.runner_up is not None and h.delta is not None:
        d = h.delta
        view["runner"] = {
            "label": _label(h.runner_up),
            "entry_file": entry_file(h.runner_up["entry_id"]),
        }
        how = (
            f"paired over {d.n} seed{'s' if d.n != 1 else ''}"
            if d.paired
            else "Welch interval: the two cells have different seeds"
        )
        view["delta"] = {
            "text": _signed(d.delta),
            "ci": _ci(d.ci_low, d.ci_high),
            "how": how,
            "verdict": "within noise" if d.within_noise else "beyond noise",
        }
    view["lines"] = [
        {
            "label": _label(x.row),
            "method": x.row["method"],
            "method_file": method_file(x.row["method"]),
            "entry_file": entry_file(x.row["entry_id"]),
            "rank": x.row["rank"],
            "mean": f"{x.row['mean']:.2f}",
            "sort": _num(x.row["mean"], ".10g"),
            "differs": x.row.get("differs") or "",
            "best": bool(x.row.get("best")),
            "margins": [_margin_cell(m) for m in x.margins],
        }
        for x in h.lines
    ]
    return view


def answers(model: SiteModel) -> list[dict[str, Any]]:
    """Per dataset with a ranked cell: its headlines, in tracks.yaml's order."""
    out = []
    for dataset in dict.fromkeys(tt.track.dataset for tt in model.tracks):
        tables = [tt for tt in model.tracks if tt.track.dataset == dataset]
        hs = dataset_headlines(tables, model.config.margin_baselines)
        if hs:
            out.append(
                {
                    "dataset": dataset,
                    "file": dataset_file(dataset),
                    "headlines": [headline_view(h) for h in hs],
                }
            )
    return out


# --------------------------------------------------------------------------------------------------
# summaries


def summary_view(st: SummaryTable) -> dict[str, Any]:
    """A summary table ready for its template: column groups per track, and per row the formatted
    cells."""
    groups: list[dict[str, Any]] = []
    for i, c in enumerate(st.columns):
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
    rows = []
    for r in st.rows:
        backbone = _backbone_of(r)
        cells = [
            {
                **_summary_cell(cell, col, i in r.several),
                "f_task": col.track_label,
                "f_partition": col.partition_short,
            }
            for i, (cell, col) in enumerate(zip(r.cells, st.columns))
        ]
        rows.append(
            {
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
                "mean_rank_sort": _num(r.mean_rank, ".6g"),
                "n_ranked": r.n_ranked,
            }
        )
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
    return {
        "dataset": st.dataset,
        "file": dataset_file(st.dataset),
        "groups": groups,
        "columns": cols,
        "filters": filters,
        "filter_links": links,
        "ranked": [r for r in rows if not r["reference"]],
        "references": [r for r in rows if r["reference"]],
        "n_columns": len(cols),
        "mean_rank_note": note,
    }


def _trains(cells: Iterable[Mapping[str, Any] | None]) -> bool:
    """False when every cell of a row ran no optimizer step (random init): it has no training budget
    to show."""
    steps = [c.get("client_steps") for c in cells if c is not None and c.get("status") != "missing"]
    return not steps or any(not _finite(x) or x > 0 for x in steps)


def _row_budget(r: Any) -> str:
    return fmt_budget(r.rounds, r.local_epochs) if _trains(r.cells) else "no training"


def steps_words(steps: Any, samples: Any) -> str:
    """``704 client steps · 11,264 samples``: the step and sample budgets (summed over clients,
    mean over seeds) beside R × E, which alone hides a batch size that multiplies the steps."""
    parts = []
    if _finite(steps) and steps:
        parts.append(f"{steps:,.0f} client steps")
    if _finite(samples) and samples:
        parts.append(f"{samples:,.0f} samples")
    return " · ".join(parts)


def _row_steps(r: Any) -> str:
    """A summary row's step and sample budgets: the median over the cells it has (one pre-training
    serves every task column, so they agree)."""
    cells = [c for c in r.cells if c is not None and c.get("status") != "missing"]

    def median(key: str) -> float:
        values = sorted(float(c[key]) for c in cells if _finite(c.get(key)) and c[key] > 0)
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
        "title": f"{_label(cell)} · {col.track_label} · {cell['partition_label']}",
    }
    if cell["status"] == "complete":
        std = f"±{cell['std']:.2f}" if _finite(cell["std"]) else ""
        return {
            **base,
            "kind": "value",
            "text": f"{cell['mean']:.2f}",
            "std": std,
            "sort": _num(cell["mean"], ".10g"),
        }
    if cell["status"] == "incomplete" and _finite(cell["partial_mean"]):
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


# --------------------------------------------------------------------------------------------------
# methods


def _method_sources(repo: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((repo / "methods").glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        for name in re.findall(r"METHODS\.register\(\s*[\"']([^\"']+)[\"']", text):
            out.setdefault(name, path)
    return out


def deviations(path: Path, repo: Path) -> list[dict[str, str]]:
    """Every ``# DEVIATION`` comment of a method's source (benchmark.core.deviations), located
    relative to the repo."""
    rel = path.relative_to(repo)
    return [{"where": f"{rel}:{d.line}", "text": d.text} for d in parse_deviations_of(path)]


def _readme_row(repo: Path, name: str) -> list[tuple[str, str]]:
    path = repo / "methods" / "README.md"
    if not path.exists():
        return []
    header: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip().startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue
        if any(c.strip("`") == name for c in cells):
            return list(zip(header, cells))
    return []


def own_papers(name: str, blob: str | None, papers: Mapping[str, MethodPapers]) -> dict[str, Any]:
    """A method's own paper(s) (papers.yaml), its reference page in docs/ and, for a reference point
    that no paper defines, the note saying so."""
    mine = papers.get(name)
    if mine is None:
        return {
            "papers": [],
            "docs": None,
            "docs_url": None,
            "note": "not listed in leaderboard/papers.yaml",
        }
    return {
        "papers": [
            {
                "title": p.title,
                "authors": ", ".join(p.authors),
                "venue": p.venue,
                "year": p.year,
                "url": p.url,
                "arxiv": p.arxiv,
                "cite": p.cite,
                "bibtex": p.bibtex(),
            }
            for p in mine.papers
        ],
        "docs": mine.docs,
        "docs_url": f"{blob}/{mine.docs}" if blob else None,
        "note": mine.note,
    }


def _ref_dataset(v: ReferenceValue) -> str:
    """The dataset a paper's number is on (its settings' ``dataset``), "—" when not stated."""
    return str(v.settings.get("dataset") or "—")


def _papers(refs: Sequence[ReferenceValue]) -> list[dict[str, Any]]:
    """Reference numbers grouped by paper, then by table: each paper is cited once."""
    by_source: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for v in refs:
        by_source[v.source][v.table].append({**_ref_dict(v), "dataset": _ref_dataset(v)})
    return [
        {
            "source": src,
            "tables": [{"table": t, "entries": e} for t, e in tables.items()],
            "n": sum(len(e) for e in tables.values()),
        }
        for src, tables in by_source.items()
    ]


def _blob_base(build: Mapping[str, str]) -> str | None:
    url, sha = build.get("repo_url") or "", build.get("commit") or ""
    return f"{url}/blob/{sha}" if commit_url(sha, url) else None


def method_pages(model: SiteModel, track_files: Mapping[str, str]) -> list[dict[str, Any]]:
    by_method: dict[str, list[ResultRecord]] = defaultdict(list)
    for _, r in model.records:
        by_method[r.method].append(r)
    sources = _method_sources(model.repo)
    refs = [v for t in model.references for v in t.values]
    blob = _blob_base(model.build)
    papers = load_papers()
    pages = []
    for name in sorted(by_method):
        recs = by_method[name]
        configs: Counter[tuple[str, str]] = Counter()
        for r in recs:
            params = (r.cell.get("method") or {}).get("params", {})
            configs[(r.method_version, json.dumps(to_plain(params), indent=2, sort_keys=True))] += 1
        results = []
        for tt in model.tracks:
            for row in track_rows_for(tt, name):
                results.append(
                    {**row, "track": tt.track.title, "track_file": track_files[tt.track.id]}
                )
        mine = [v for v in refs if v.method == name]
        src = sources.get(name)
        readme = [
            (k, mdtext.inline(v, blob_base=blob, source_dir="methods"))
            for k, v in _readme_row(model.repo, name)
        ]
        pages.append(
            {
                "name": name,
                "file": method_file(name),
                "n_records": len(recs),
                "reference_point": model.config.reference_points.get(name),
                "versions": sorted({r.method_version for r in recs}),
                "papers": _papers(mine),
                "n_references": len(mine),
                "own": own_papers(name, blob, papers),
                "datasets": sorted({r.dataset for r in recs}),
                "ref_datasets": sorted({_ref_dataset(v) for v in mine} - {"—"}),
                "commit": model.build.get("commit", ""),
                "source": str(src.relative_to(model.repo)) if src else None,
                "source_url": f"{blob}/{src.relative_to(model.repo)}" if src and blob else None,
                "deviations": deviations(src, model.repo) if src else [],
                "readme": readme,
                "results": results,
                "configs": [
                    {"version": v, "json": j, "n": n} for (v, j), n in configs.most_common()
                ],
            }
        )
    return pages


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
                }
            )
    return out


# --------------------------------------------------------------------------------------------------
# site


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["bytes"] = fmt_bytes
    env.filters["baseline_name"] = baseline_name
    from benchmark.records.acceptance import tolerance_text

    # the legend's statement of the re-evaluation tolerance
    env.globals["reeval_tolerance"] = tolerance_text()
    return env


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _clean(obj.item())
    return obj


class _Site:
    """One build: the output folder, the template environment and what every page shares."""

    def __init__(self, model: SiteModel, out: Path) -> None:
        self.model, self.out, self.env = model, out, environment()
        self.sources = list(model.sources)
        self.track_files = {tt.track.id: f"{tt.track.id}.html" for tt in model.tracks}
        self.seeds_of = {r.cell_id: r.seed for _, r in model.records}
        self.rows = {tt.track.id: track_rows(tt, self.seeds_of) for tt in model.tracks}
        build = dict(model.build)
        build.setdefault("date", "")
        build.setdefault("commit", "unknown")
        build.setdefault("repo_url", "")
        self.summarized = {s.dataset for s in model.summaries}
        self.answers = answers(model)
        self.common = {
            "baselines": list(model.config.margin_baselines),
            "citation": model.config.citation,
            "n_skipped": len(model.skipped) + len(model.reference_errors),
            "build": {**build, "commit_url": commit_url(build["commit"], build["repo_url"])},
            "datasets": [
                {"name": s.dataset, "file": dataset_file(s.dataset)} for s in model.summaries
            ],
        }

    def page(self, rel: str, template: str, **ctx: Any) -> None:
        root = "../" * rel.count("/")
        text = self.env.get_template(template).render(root=root, **self.common, **ctx)
        (self.out / rel).write_text(text, encoding="utf-8")


def render_site(model: SiteModel, out: Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("tracks", "methods", "cells", "entries", "datasets", "partitions", "csv", "plots"):
        if (out / sub).exists():
            shutil.rmtree(out / sub)
        if sub != "plots":
            (out / sub).mkdir()
    shutil.copytree(HERE / "static", out / "static", dirs_exist_ok=True)
    site = _Site(model, out)
    summaries = [_write_track(site, tt) for tt in model.tracks]
    views = [summary_view(st) for st in model.summaries]
    by_dataset = {a["dataset"]: a for a in site.answers}
    for view in views:
        site.page(
            f"datasets/{view['file']}",
            "summary.html",
            s=view,
            a=by_dataset.get(view["dataset"]),
            reference_points=model.config.reference_points,
        )
    _write_entries(site)
    _write_cells(site)
    _write_partitions(site)
    methods = method_pages(model, site.track_files)
    for m in methods:
        site.page(f"methods/{m['file']}", "method.html", m=m)
    _write_misc(site, summaries, methods, views)
    _write_data(site)
    return out / "index.html"


def _write_track(site: _Site, tt: TrackTable) -> dict[str, Any]:
    t, rows = tt.track, site.rows[tt.track.id]
    federation = ", ".join(f"{k}={v}" for k, v in t.federation.items()) or "any"
    refs = [
        {**x, "ref": _ref_dict(x["ref"]), "alpha_text": fmt_alpha(x["alpha"])}
        for x in tt.references
    ]
    site.page(
        f"tracks/{site.track_files[t.id]}",
        "track.html",
        t=t,
        rows=[r for r in rows if not r["reference"]],
        ref_rows=[r for r in rows if r["reference"]],
        card_name=tt.card_name,
        card_id=tt.card_id,
        card_summary=tt.card_summary,
        metric=tt.metric,
        higher=tt.higher_is_better,
        federation=federation,
        plots=track_plots(tt, rows) if rows else None,
        references=refs,
        pairs=_pair_view(site.model.pairs.get(t.id, [])),
        test_selected=_record_rows(tt.selects_on_test),
        margins=_margin_view(tt, rows),
        excluded=_record_rows(tt.excluded_cards),
        reference_points=site.model.config.reference_points,
        dataset_link=dataset_file(t.dataset) if t.dataset in site.summarized else None,
        **_track_filters(site, tt, rows),
    )
    best = [
        {"text": f"{r['partition_short']}: {_label(r)}", "entry_file": r["entry_file"]}
        for r in rows
        if r["best"]
    ]
    return {
        "title": t.title,
        "file": site.track_files[t.id],
        "dataset": t.dataset,
        "task": t.task,
        "federation_short": _federation_short(t.federation),
        "card": tt.card_name,
        "card_id": tt.card_id,
        "federation": federation,
        "min_seeds": t.min_seeds,
        "n_methods": len({r["method"] for r in rows}),
        "n_complete": sum(r["status"] == "complete" for r in rows),
        "n_incomplete": sum(r["status"] != "complete" for r in rows),
        "best": best,
    }


def _track_filters(
    site: _Site, tt: TrackTable, rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The filter bar of a track page: its dataset's other tracks (links), its partitions and its
    methods."""
    siblings = [
        x for x in site.model.tracks if x.track.dataset == tt.track.dataset and not x.table.empty
    ]
    values = {
        "task": [x.track.short for x in siblings],
        "partition": list(dict.fromkeys(r["partition_short"] for r in rows)),
        "method": list(dict.fromkeys(r["method"] for r in rows)),
    }
    links = {
        "task": {x.track.short: f"tracks/{site.track_files[x.track.id]}" for x in siblings},
        "partition": {r["partition_short"]: f"partitions/{r['partition_file']}" for r in rows},
        "method": {r["method"]: f"methods/{r['method_file']}" for r in rows},
    }
    return {"filter_values": values, "filter_links": links}


def _federation_short(federation: Mapping[str, Any]) -> str:
    names = {"num_clients": "K", "participation": "p"}
    return (
        ", ".join(
            f"{names.get(k, k)}={v:g}" if isinstance(v, float) else f"{names.get(k, k)}={v}"
            for k, v in federation.items()
        )
        or "any"
    )


def _write_entries(site: _Site) -> None:
    by_id = {r.cell_id: (p, r) for p, r in site.model.records}
    for tt in site.model.tracks:
        for row in site.rows[tt.track.id]:
            if not row["entry_file"] or not row["cell_ids"]:
                continue
            seeds = []
            for c in sorted(row["cell_ids"], key=lambda c: site.seeds_of.get(c, -1)):
                _, rec = by_id[c]
                score = rec.score(tt.track.task)
                seeds.append(
                    {
                        "seed": rec.seed,
                        "file": cell_file(c),
                        "cell_id": c,
                        "status": rec.status,
                        "value": f"{score.main:.2f}" if score else "—",
                        "bytes": fmt_bytes(_per_client(rec)),
                        "wall": fmt_wall(rec.compute.wall_time_s),
                        "machine": rec.env.machine or f"{rec.env.device} (model not recorded)",
                        "commit": rec.env.git_sha,
                        "commit_url": commit_url(rec.env.git_sha, site.common["build"]["repo_url"]),
                        "verified": rec.env.runner == VERIFIED_RUNNER,
                        "runner": rec.env.runner,
                        "reevaluated": c in site.model.acceptances,
                    }
                )
            site.page(
                f"entries/{row['entry_file']}",
                "entry.html",
                t=tt.track,
                r=row,
                seeds=seeds,
                metric=tt.metric,
                card_name=tt.card_name,
            )


def _per_client(rec: ResultRecord) -> float:
    from leaderboard.build import _per_client as per_client

    return per_client(
        rec.comm.bytes_up + rec.comm.bytes_down, (rec.cell.get("fl") or {}).get("num_clients")
    )


def _write_cells(site: _Site) -> None:
    tracks_of = site.model.cell_tracks()
    repo_url = site.common["build"]["repo_url"]
    for path, r in site.model.records:
        stem = slug(r.cell_id)
        shutil.copyfile(path, site.out / "cells" / f"{stem}.json")
        cell_json = json.dumps(to_plain(r.cell), indent=2, sort_keys=True, ensure_ascii=False)
        (site.out / "cells" / f"{stem}.cell.json").write_text(cell_json + "\n", encoding="utf-8")
        part = (r.cell.get("partition") or {}) if isinstance(r.cell, Mapping) else {}
        on = [
            {
                "title": tt.track.title,
                "file": site.track_files[tt.track.id],
                "entry_file": entry_file(e),
            }
            for tt, e in tracks_of.get(r.cell_id, [])
        ]
        site.page(
            f"cells/{stem}.html",
            "cell.html",
            r=r,
            verified=r.env.runner == VERIFIED_RUNNER,
            acceptance=site.model.acceptances.get(r.cell_id),
            method_file=method_file(r.method),
            bytes_text=fmt_bytes(r.comm.bytes_up + r.comm.bytes_down),
            bytes_client=fmt_bytes(_per_client(r)),
            peak_mem=fmt_bytes(r.compute.peak_mem_bytes),
            wandb_url=wandb_url(r),
            partition_stats=[
                (k, round_stat(v)) for k, v in sorted(dict(r.partition_stats).items())
            ],
            partition_file=partition_file(r.dataset, r.partition_label),
            partition_name=part.get("name"),
            path=display_path(path, site.sources),
            raw_file=f"{stem}.json",
            config_file=f"{stem}.cell.json",
            cell_json=cell_json,
            tracks=on,
            commit_url=commit_url(r.env.git_sha, repo_url),
            machine=r.env.machine or f"{r.env.device} (model not recorded)",
            env_json=json.dumps(to_plain(r.env), indent=2, sort_keys=True, ensure_ascii=False),
        )


def _write_partitions(site: _Site) -> None:
    groups: dict[tuple[str, str], list[ResultRecord]] = defaultdict(list)
    for _, r in site.model.records:
        groups[(r.dataset, r.partition_label)].append(r)
    shorts = (
        dict(
            zip(
                zip(site.model.frame["dataset"], site.model.frame["partition_label"]),
                site.model.frame["partition_short"],
            )
        )
        if not site.model.frame.empty
        else {}
    )
    for (dataset, label), recs in sorted(groups.items()):
        part = dict(recs[0].cell.get("partition") or {})
        digests: dict[str, list[ResultRecord]] = defaultdict(list)
        for r in recs:
            digests[r.partition_digest].append(r)
        views = [
            {
                "digest": d,
                "n": len(rs),
                "methods": sorted({r.method for r in rs}),
                "stats": [
                    (k, round_stat(v)) for k, v in sorted(dict(rs[0].partition_stats).items())
                ],
            }
            for d, rs in sorted(digests.items(), key=lambda kv: -len(kv[1]))
        ]
        site.page(
            f"partitions/{partition_file(dataset, label)}",
            "partition.html",
            dataset=dataset,
            label=label,
            short=shorts.get((dataset, label), label),
            name=part.get("name"),
            params=json.dumps(
                to_plain(part.get("params") or {}), indent=2, sort_keys=True, ensure_ascii=False
            ),
            alpha_text=fmt_alpha(_alpha_of(part)),
            digests=views,
            partition_seed=recs[0].cell.get("partition_seed"),
            num_clients=sorted(
                {(r.cell.get("fl") or {}).get("num_clients") for r in recs}, key=str
            ),
        )


def _alpha_of(part: Mapping[str, Any]) -> float | None:
    from leaderboard.build import alpha_of

    return alpha_of(part.get("name"), part.get("params"))


def _write_misc(
    site: _Site,
    summaries: list[dict[str, Any]],
    methods: list[dict[str, Any]],
    views: list[dict[str, Any]],
) -> None:
    model = site.model
    skipped = [
        {"path": display_path(s.path, site.sources), "reason": s.reason} for s in model.skipped
    ]
    ref_errors = [(display_path(p, site.sources), why) for p, why in model.reference_errors]
    site.page("skipped.html", "skipped.html", skipped=skipped, reference_errors=ref_errors)
    site.page("references.html", "references.html", papers=reference_papers(model))
    by_id = {r.cell_id: r for _, r in model.records}
    untracked = [
        {
            "cell_id": c,
            "file": cell_file(c),
            "method": by_id[c].method,
            "dataset": by_id[c].dataset,
            "partition": by_id[c].partition_label,
            "seed": by_id[c].seed,
            "tasks": ", ".join(s.task for s in by_id[c].scores),
        }
        for c in model.untracked
    ]
    sources = sorted({Path(p).name or str(p) for p in model.sources}) or ["the given folders"]
    site.page(
        "index.html",
        "index.html",
        tracks=summaries,
        methods=methods,
        untracked=untracked,
        n_records=len(model.records),
        sources=sources,
        summaries=views,
        reference_points=model.config.reference_points,
        answers=site.answers,
    )
    site.page("legend.html", "legend.html")
    _write_submit(site)
    site.page(
        "changes.html",
        "changes.html",
        entries=results_changelog(model, site.summarized),
        n_records=len(model.records),
    )


_PROTOCOL_DOCS = ("partitioning", "evaluation")


def docs_citation(spec: str | None) -> str:
    """A reference table's pointer to its method notes (``flesd.md §5; evaluation.md §6``) as the
    repository's documentation paths (``docs/methods/flesd.md §5; docs/protocols/evaluation.md
    §6``)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        return f"docs/{'protocols' if name in _PROTOCOL_DOCS else 'methods'}/{name}.md"

    return re.sub(r"(?<![/\w])([a-z_]+)\.md", one, spec or "")


def reference_papers(model: SiteModel) -> list[dict[str, Any]]:
    """references.html: the reference tables grouped by paper (the file name's prefix is the paper's
    key in papers.yaml), each paper with its citation and link, each table with an anchor, its
    dataset column."""
    known = {p.key: p for m in load_papers().values() for p in m.papers}
    by_paper: dict[str, list[Any]] = defaultdict(list)
    for t in model.references:
        by_paper[t.path.stem.split("_table")[0]].append(t)
    out = []
    for key, tables in by_paper.items():
        paper = known.get(key)
        out.append(
            {
                "anchor": f"paper-{slug(key)}",
                "source": tables[0].source,
                "cite": paper.cite if paper else short_source(tables[0].source),
                "paper": None
                if paper is None
                else {
                    "title": paper.title,
                    "authors": ", ".join(paper.authors),
                    "venue": paper.venue,
                    "year": paper.year,
                    "url": paper.url,
                    "arxiv": paper.arxiv,
                },
                "tables": [
                    {
                        "table": t.table,
                        "file": t.path.name,
                        "spec": docs_citation(t.spec),
                        "notes": t.notes,
                        "anchor": slug(t.path.stem),
                        "entries": [{**_ref_dict(v), "dataset": _ref_dataset(v)} for v in t.values],
                    }
                    for t in tables
                ],
            }
        )
    return out


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


SUBMIT_DOC = "docs/adding-a-method.md"


def _write_submit(site: _Site) -> None:
    """The "Submit your method" page: docs/adding-a-method.md rendered (raw HTML escaped, relative
    links into the repository at the build's commit)."""
    path = site.model.repo / SUBMIT_DOC
    text = (
        path.read_text(encoding="utf-8")
        if path.exists()
        else f"*{SUBMIT_DOC} is not in this checkout.*"
    )
    blob = _blob_base(site.model.build)
    site.page(
        "submit.html",
        "submit.html",
        body=mdtext.block(text, blob_base=blob, source_dir="docs"),
        source=SUBMIT_DOC,
        source_url=f"{blob}/{SUBMIT_DOC}" if blob else None,
    )


# --------------------------------------------------------------------------------------------------
# data


_CSV_RISKY = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Text cells a spreadsheet would run as a formula (``=HYPERLINK(...)`` in a method name, also
    after leading spaces, tabs or line breaks) get a leading apostrophe; numbers are left alone.
    Lists and dicts are written as JSON. The writer quotes every field, so a carriage return inside
    a name cannot start a row."""

    def fix(v: Any) -> Any:
        if isinstance(v, (list, tuple, dict)):
            v = json.dumps(_clean(v), sort_keys=True, default=str)
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


def _write_csv(path: Path, frame: pd.DataFrame) -> None:
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


def _write_data(site: _Site) -> None:
    model, out = site.model, site.out
    tracks, margins = _track_frames(model)
    _write_csv(out / "csv" / "tracks.csv", tracks)
    _write_csv(out / "csv" / "margins.csv", margins)
    _write_csv(out / "csv" / "summaries.csv", _summary_frame(model))
    pairs = [pairs_frame(p).assign(track=tid) for tid, p in model.pairs.items() if p]
    _write_csv(
        out / "csv" / "paper-pairs.csv",
        pd.concat(pairs, ignore_index=True) if pairs else pd.DataFrame(),
    )
    for tt in model.tracks:
        _write_csv(
            out / "csv" / f"{tt.track.id}.csv",
            tracks[tracks["track"] == tt.track.id] if not tracks.empty else tracks,
        )
    data = {
        "build": site.common["build"],
        "tracks": [_track_data(tt, site.rows[tt.track.id]) for tt in model.tracks],
        "summaries": _summary_frame(model).to_dict("records"),
        "skipped": [
            {"path": display_path(s.path, site.sources), "reason": s.reason} for s in model.skipped
        ],
        "reference_errors": [
            {"path": display_path(p, site.sources), "reason": why}
            for p, why in model.reference_errors
        ],
        "untracked": model.untracked,
    }
    (out / "data.json").write_text(
        json.dumps(_clean(data), indent=1, sort_keys=True, default=str, allow_nan=False) + "\n",
        encoding="utf-8",
    )


_ROW_KEYS = (
    "method",
    "method_version",
    "variant",
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
            {**_ref_dict(x["ref"]), "comparable": x["comparable"], "would_rank": x["would_rank"]}
            for x in tt.references
        ],
    }
