"""Tables → static HTML, plots and data.json (DESIGN §1.2). Jinja2 with autoescape on for every template; all numbers
come from :mod:`leaderboard.build`; this module only formats them, draws the plots and writes files.

Every record-provided string reaches HTML through autoescaping, never through ``|safe``. Names used in file names go
through :func:`leaderboard.build.slug`; links taken from records are kept only for http(s).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import jinja2

from benchmark.records.reference import ReferenceValue
from benchmark.deviations import deviations as parse_deviations_of
from benchmark.records.canonical import to_plain
from benchmark.records.schema import ResultRecord
from leaderboard.build import VERIFIED_RUNNER, SiteModel, TrackTable, slug
from leaderboard.margins import margin_rows

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------------- formatting


def fmt_bytes(n: float | None) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "—"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def fmt_alpha(a: float | None) -> str:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return "—"
    return "IID" if math.isinf(a) else f"{a:g}"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_compute(gpu_hours: float | None, wall_s: float | None) -> tuple[str, str]:
    if _finite(gpu_hours) and gpu_hours > 0:
        return f"{gpu_hours:.2f} GPU-h", f"{gpu_hours * 3600:.6g}"
    if _finite(wall_s):
        return f"{wall_s / 3600:.2f} h (CPU wall)", f"{wall_s:.6g}"
    return "—", ""


def safe_url(url: Any) -> str | None:
    """Only absolute http(s) links from records become hrefs (a ``javascript:`` URL would run on click)."""
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


def _settings_text(settings: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(dict(settings).items()))


def _ref_dict(ref: ReferenceValue) -> dict[str, Any]:
    return {**{k: getattr(ref, k) for k in ("source", "table", "file", "row", "column", "method", "card", "card_id",
                                          "selection", "metric", "unit", "mean", "std", "uncertain")},
            "display": ref.display, "percent": ref.percent, "settings_text": _settings_text(ref.settings)}


# ---------------------------------------------------------------------------------------------------- rows


def track_rows(tt: TrackTable, seeds_of: dict[str, int]) -> list[dict[str, Any]]:
    rows = []
    for r in tt.table.to_dict("records"):
        values = r["values"] or []
        status = r["status"]
        if status == "complete":
            std = "" if not _finite(r["std"]) else f" ± {r['std']:.2f}"
            mean_text = f"{r['mean']:.2f}{std}"
            ci = f"[{r['ci_low']:.2f}, {r['ci_high']:.2f}]" if _finite(r["ci_low"]) else "—"
        elif status == "missing":
            mean_text, ci = "missing", "—"
        elif values:
            mean_text, ci = "incomplete: " + ", ".join(f"{v:.2f}" for v in values), "—"
        else:
            mean_text, ci = ("diverged" if r["n_diverged"] else "no score"), "—"
        compute_text, compute_sort = fmt_compute(r["gpu_hours"], r["wall_time_s"])
        alpha = r["alpha"]
        rows.append({
            **r, "mean_text": mean_text, "mean_sort": f"{r['mean']:.10g}" if _finite(r["mean"]) else "",
            "ci_text": ci, "alpha_text": fmt_alpha(alpha),
            "alpha_sort": _alpha_sort(alpha),
            "bytes_text": fmt_bytes(r["bytes"]), "bytes_sort": f"{r['bytes']:.0f}" if _finite(r["bytes"]) else "",
            "compute_text": compute_text, "compute_sort": compute_sort, "method_file": method_file(r["method"]),
            "digest_short": (r["partition_digest"] or "")[:8],
            "cells": sorted(({"file": cell_file(c), "seed": seeds_of.get(c, -1)} for c in r["cell_ids"]),
                            key=lambda c: c["seed"]),
        })
    return rows


def _record_rows(frame: Any) -> list[dict[str, Any]]:
    return [{"cell_id": x["cell_id"], "file": cell_file(x["cell_id"]), "method": x["method"],
             "card": x["card_name"], "card_id": x["card_id"],
             "value": f"{x['value']:.2f}" if _finite(x["value"]) else "—"} for x in frame.to_dict("records")]


# ---------------------------------------------------------------------------------------------------- plot


def plot_track(tt: TrackTable, path: Path) -> None:
    """Mean ± std per method against α (log axis; IID drawn at the right edge). Incomplete cells are hollow;
    paper-reported numbers for the same dataset and task are grey crosses (other protocols unless marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = tt.table[tt.table["alpha"].map(_valid_alpha)]
    refs = [x for x in tt.references if _valid_alpha(x["alpha"])]
    alphas = [*table["alpha"], *(x["alpha"] for x in refs)]
    finite = [a for a in alphas if math.isfinite(a)]
    iid_x = max(finite) * 10 if finite else 10.0

    def xpos(a: float) -> float:
        return iid_x if math.isinf(a) else a

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=100)
    labels = table["method"].astype(str) + table["variant"].fillna("").map(lambda v: f" ({v})" if v else "")
    for label, g in table.assign(_label=labels).groupby("_label", sort=True):
        g = g.assign(_x=g["alpha"].map(xpos)).sort_values("_x")
        done = g[g["status"] == "complete"]
        line = ax.errorbar(done["_x"], done["mean"], yerr=done["std"].fillna(0), marker="o", capsize=3,
                           label=str(label))
        part = g[(g["status"] == "incomplete") & g["values"].map(bool)]
        if not part.empty:
            ax.plot(part["_x"], [sum(v) / len(v) for v in part["values"]], linestyle="none", marker="o",
                    markerfacecolor="none", color=line[0].get_color())
    if refs:
        ax.plot([xpos(x["alpha"]) for x in refs], [x["ref"].percent for x in refs], linestyle="none", marker="x",
                color="0.55", label="paper-reported (see table)")
    ax.set_xscale("log")
    ticks = sorted({xpos(a) for a in alphas})
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels(["IID" if t == iid_x else f"{t:g}" for t in ticks])
    ax.set_xlabel("heterogeneity: Dirichlet α (smaller is more heterogeneous)")
    ax.set_ylabel(f"{tt.metric or 'score'} (mean ± std over seeds)")
    ax.set_title(tt.track.title, fontsize=10)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------- methods


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
    """Every ``# DEVIATION`` comment of a method's source (benchmark.deviations), located relative to the repo."""
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


def _spec_path(repo: Path, name: str) -> str | None:
    for candidate in (repo / "specs" / f"{name}.md", repo / "docs" / "specs" / f"{name}.md"):
        if candidate.exists():
            return str(candidate.relative_to(repo))
    return None


def method_pages(model: SiteModel, track_files: dict[str, str]) -> list[dict[str, Any]]:
    by_method: dict[str, list[ResultRecord]] = defaultdict(list)
    for _, r in model.records:
        by_method[r.method].append(r)
    sources = _method_sources(model.repo)
    refs = [v for t in model.references for v in t.values]
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
                results.append({**row, "track": tt.track.title, "track_file": track_files[tt.track.id]})
        my_refs = [_ref_dict(v) for v in refs if v.method == name]
        src = sources.get(name)
        pages.append({
            "name": name, "file": method_file(name), "n_records": len(recs),
            "versions": sorted({r.method_version for r in recs}),
            "papers": sorted({v["source"] for v in my_refs}), "spec": _spec_path(model.repo, name),
            "source": str(src.relative_to(model.repo)) if src else None,
            "deviations": deviations(src, model.repo) if src else [],
            "readme": _readme_row(model.repo, name), "references": my_refs, "results": results,
            "configs": [{"version": v, "json": j, "n": n} for (v, j), n in configs.most_common()],
        })
    return pages


def track_rows_for(tt: TrackTable, method: str) -> list[dict[str, Any]]:
    out = []
    for r in track_rows(tt, {}):
        if r["method"] == method:
            out.append({"partition": r["partition_label"], "value": r["mean_text"], "status": r["status"],
                        "seeds": f"{r['n_seeds']}/{tt.track.min_seeds}",
                        "rank": r["rank"] if r["rank"] is not None else "—"})
    return out


# ---------------------------------------------------------------------------------------------------- site


def environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return str(obj)


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


def render_site(model: SiteModel, out: Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("tracks", "methods", "cells", "plots"):
        if (out / sub).exists():
            shutil.rmtree(out / sub)
        (out / sub).mkdir()
    shutil.copytree(HERE / "static", out / "static", dirs_exist_ok=True)
    env = environment()
    common = {"n_skipped": len(model.skipped) + len(model.reference_errors)}
    seeds_of = {r.cell_id: r.seed for _, r in model.records}
    track_files = {tt.track.id: f"{tt.track.id}.html" for tt in model.tracks}

    summaries, data_tracks = [], []
    for tt in model.tracks:
        rows = track_rows(tt, seeds_of)
        t = tt.track
        federation = ", ".join(f"{k}={v}" for k, v in t.federation.items()) or "any"
        plot_file = f"{t.id}.svg"
        if rows:
            plot_track(tt, out / "plots" / plot_file)
        refs = [{**x, "ref": _ref_dict(x["ref"]), "alpha_text": fmt_alpha(x["alpha"])} for x in tt.references]
        (out / "tracks" / track_files[t.id]).write_text(env.get_template("track.html").render(
            root="../", t=t, rows=rows, card_name=tt.card_name, card_id=tt.card_id, card_summary=tt.card_summary,
            metric=tt.metric, higher=tt.higher_is_better, federation=federation, plot_file=plot_file,
            references=refs, test_selected=_record_rows(tt.selects_on_test),
            margins=margin_rows(tt.margins) if tt.margins is not None else None,
            excluded=_record_rows(tt.excluded_cards), **common), encoding="utf-8")
        best = []
        complete_per_group: dict[tuple, int] = defaultdict(int)
        for r in rows:
            if r["status"] == "complete":
                complete_per_group[(r["partition_label"], r["partition_digest"])] += 1
        for r in rows:  # a method alone in its partition (FLESD's public carve-out) is not "best" of anything
            if r["rank"] == 1 and complete_per_group[(r["partition_label"], r["partition_digest"])] > 1:
                best.append(f"{fmt_alpha(r['alpha'])}: {r['method']}" + (f" ({r['variant']})" if r["variant"] else ""))
        summaries.append({
            "title": t.title, "file": track_files[t.id], "dataset": t.dataset, "task": t.task, "card": tt.card_name,
            "card_id": tt.card_id, "federation": federation, "min_seeds": t.min_seeds,
            "n_methods": len({r["method"] for r in rows}),
            "n_complete": sum(r["status"] == "complete" for r in rows),
            "n_incomplete": sum(r["status"] != "complete" for r in rows), "best": best,
        })
        data_tracks.append({
            "id": t.id, "title": t.title, "dataset": t.dataset, "task": t.task, "card": tt.card_name,
            "card_id": tt.card_id, "metric": tt.metric, "higher_is_better": tt.higher_is_better,
            "min_seeds": t.min_seeds,
            "rows": [{k: r[k] for k in ("method", "method_version", "variant", "config_key", "partition_label",
                                        "partition_digest", "alpha",
                                        "status", "n_seeds", "n_diverged", "seeds", "values", "mean", "std",
                                        "ci_low", "ci_high", "rank", "noise_group", "bytes", "wall_time_s",
                                        "gpu_hours", "uses_public_data", "verified", "cell_ids")} for r in rows],
            "references": [{**x["ref"], "comparable": x["comparable"], "would_rank": x["would_rank"]} for x in refs],
        })

    methods = method_pages(model, track_files)
    for m in methods:
        (out / "methods" / m["file"]).write_text(
            env.get_template("method.html").render(root="../", m=m, **common), encoding="utf-8")

    cell_tpl = env.get_template("cell.html")
    for path, r in model.records:
        stats_items = [(k, v) for k, v in sorted(dict(r.partition_stats).items())]
        (out / "cells" / cell_file(r.cell_id)).write_text(cell_tpl.render(
            root="../", r=r, verified=r.env.runner == VERIFIED_RUNNER, method_file=method_file(r.method),
            bytes_text=fmt_bytes(r.comm.bytes_up + r.comm.bytes_down), peak_mem=fmt_bytes(r.compute.peak_mem_bytes),
            wandb_url=wandb_url(r), partition_stats=stats_items, path=str(path),
            cell_json=json.dumps(to_plain(r.cell), indent=2, sort_keys=True, ensure_ascii=False),
            env_json=json.dumps(to_plain(r.env), indent=2, sort_keys=True, ensure_ascii=False), **common),
            encoding="utf-8")

    (out / "skipped.html").write_text(env.get_template("skipped.html").render(
        root="", skipped=model.skipped, reference_errors=model.reference_errors, **common), encoding="utf-8")
    ref_tables = [{"source": t.source, "table": t.table, "file": t.path.name, "spec": t.spec, "notes": t.notes,
                   "anchor": slug(t.path.stem), "entries": [_ref_dict(v) for v in t.values]} for t in model.references]
    (out / "references.html").write_text(env.get_template("references.html").render(
        root="", tables=ref_tables, **common), encoding="utf-8")

    by_id = {r.cell_id: r for _, r in model.records}
    untracked = [{"cell_id": c, "file": cell_file(c), "method": by_id[c].method, "dataset": by_id[c].dataset,
                  "partition": by_id[c].partition_label, "seed": by_id[c].seed,
                  "tasks": ", ".join(s.task for s in by_id[c].scores)} for c in model.untracked]
    sources = sorted({str(p) for p in getattr(model, "sources", [])}) or ["the given folders"]
    index = out / "index.html"
    index.write_text(env.get_template("index.html").render(
        root="", tracks=summaries, methods=methods, untracked=untracked, n_records=len(model.records),
        sources=sources, **common), encoding="utf-8")
    data = {"tracks": data_tracks,
            "skipped": [{"path": str(s.path), "reason": s.reason} for s in model.skipped],
            "reference_errors": [{"path": str(p), "reason": why} for p, why in model.reference_errors],
            "untracked": model.untracked}
    (out / "data.json").write_text(json.dumps(_clean(data), indent=1, sort_keys=True, default=_json_default,
                                              allow_nan=False) + "\n", encoding="utf-8")
    return index
