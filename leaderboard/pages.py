"""View models → files: the static HTML pages (Jinja2, autoescape on for every template), the
copied record files and the static assets; the downloads come from :mod:`leaderboard.exports`.
All numbers come from :mod:`leaderboard.build` and are formatted by :mod:`leaderboard.view_models`.

Every record-provided string reaches HTML through autoescaping, never through ``|safe`` (the one
exception is Markdown, rendered by :mod:`leaderboard.mdtext` with raw HTML escaped). Names used in
file names go through :func:`leaderboard.formatting.slug`; links taken from records are kept only
for http(s). No page shows an absolute local path: record files are named relative to the results
folder they were found in.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from benchmark.core.canonical import to_plain
from benchmark.records.schema import ResultRecord
from leaderboard import mdtext
from leaderboard.build import SiteModel
from leaderboard.compare import compare_data, default_pair, pair_rows
from leaderboard.exports import ExportContext, write_data
from leaderboard.formatting import (
    baseline_name,
    blob_base,
    cell_commands,
    cell_file,
    commit_url,
    dataset_file,
    display_path,
    entry_file,
    federation_short,
    fmt_alpha,
    fmt_bytes,
    fmt_wall,
    method_file,
    partition_file,
    slug,
    wandb_url,
)
from leaderboard.labels import round_stat
from leaderboard.loading import (
    VERIFIED_RUNNER,
    alpha_of,
    bytes_per_client,
    retrained_columns,
    traffic_underived,
)
from leaderboard.method_views import method_pages, reference_papers
from leaderboard.scope import RECORDS_FILE, partition_words, records_scope, write_records
from leaderboard.submitted import UNRANKED
from leaderboard.tables import TrackTable
from leaderboard.view_models import (
    answers,
    margin_view,
    pair_view,
    record_rows,
    ref_view,
    results_changelog,
    row_label,
    summary_view,
    track_filters,
    track_plots,
    track_rows,
)

HERE = Path(__file__).resolve().parent


def shipped_grids() -> list[str]:
    """The grid names this checkout ships (benchmark/grids/*.yaml): a cell page prints its re-run
    commands only for these."""
    import benchmark.grids

    return sorted(p.stem for p in Path(benchmark.grids.__file__).parent.glob("*.yaml"))


def _visible(value: Any) -> Any:
    """A template value with its Unicode format characters (bidi controls, zero-width) escaped: a
    record's machine name with U+202E reversed its track-table cell."""
    from benchmark.core.terminal import visible

    if isinstance(value, Markup):
        return Markup(visible(str(value)))
    return visible(value) if isinstance(value, str) else value


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_visible,  # every value a page shows: format characters escaped (issue 52)
    )
    env.filters["bytes"] = fmt_bytes
    env.filters["baseline_name"] = baseline_name
    env.filters["partition_words"] = partition_words
    from benchmark.records.acceptance_files import tolerance_text

    # the legend's statement of the re-evaluation tolerance
    env.globals["reeval_tolerance"] = tolerance_text()
    return env


class Site:
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
    site = Site(model, out)
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
    write_data(model, out, ExportContext(site.common["build"], site.rows, site.sources))
    write_records(model, out)
    return out / "index.html"


def _write_track(site: Site, tt: TrackTable) -> dict[str, Any]:
    t, rows = tt.track, site.rows[tt.track.id]
    federation = ", ".join(f"{k}={v}" for k, v in t.federation.items()) or "any"
    refs = [
        {**x, "ref": ref_view(x["ref"]), "alpha_text": fmt_alpha(x["alpha"])} for x in tt.references
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
        pairs=pair_view(site.model.pairs.get(t.id, [])),
        test_selected=record_rows(tt.selects_on_test),
        margins=margin_view(tt, rows),
        excluded=record_rows(tt.excluded_cards),
        reference_points=site.model.config.reference_points,
        dataset_link=dataset_file(t.dataset) if t.dataset in site.summarized else None,
        **track_filters(site.model.tracks, site.track_files, tt, rows),
    )
    best = [_best_item(r, rows) for r in rows if r["best"]]
    return {
        "title": t.title,
        "file": site.track_files[t.id],
        "dataset": t.dataset,
        "task": t.task,
        "federation_short": federation_short(t.federation),
        "card": tt.card_name,
        "card_id": tt.card_id,
        "federation": federation,
        "min_seeds": t.min_seeds,
        "n_methods": len({r["method"] for r in rows}),
        "n_complete": sum(r["status"] == "complete" for r in rows),
        "n_incomplete": sum(r["status"] != "complete" for r in rows),
        "best": best,
    }


NOT_REMEASURED = " (reported, not re-measured)"
NOT_DERIVED = " (reported, not re-measured; traffic not derived)"


def _remeasured(acceptance: Mapping[str, Any] | None) -> str:
    """What an entry page says beside a seed's bytes: nothing for the runner's own record; for an
    accepted one, that it was not re-measured (its scores were re-run; its traffic was checked
    against the method's declaration, or, for a method that declares nothing, not derived)."""
    if acceptance is None:
        return ""
    return NOT_DERIVED if traffic_underived(acceptance) else NOT_REMEASURED


def _best_item(r: Mapping[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The index's "best (per partition)" entry of a pool's best row: flagged when it is not like
    for like, and then with the pool's best-ranked like-for-like row beside it."""
    like = None
    if r["differs"]:
        pool = [
            x
            for x in rows
            if x["partition_label"] == r["partition_label"]
            and x["rank"] is not None
            and not x["reference"]
            and not x["differs"]
        ]
        first = min(pool, key=lambda x: (x["rank"], x["method"]), default=None)
        if first is not None:
            like = {"text": row_label(first), "entry_file": first["entry_file"]}
    return {
        "text": f"{r['partition_short']}: {row_label(r)}",
        "entry_file": r["entry_file"],
        "differs": r["differs"],
        "like": like,
    }


def _write_entries(site: Site) -> None:
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
                        # an accepted record's scores were re-run, its traffic was not (issue 44)
                        "bytes": fmt_bytes(bytes_per_client(rec))
                        + _remeasured(site.model.acceptances.get(c)),
                        "wall": fmt_wall(rec.compute.wall_time_s),
                        "machine": rec.env.machine or f"{rec.env.device} (model not recorded)",
                        "commit": rec.env.git_sha,
                        "commit_url": commit_url(rec.env.git_sha, site.common["build"]["repo_url"]),
                        "verified": rec.env.runner == VERIFIED_RUNNER,
                        "runner": rec.env.runner,
                        "reevaluated": c in site.model.acceptances,
                        "retrained": bool(
                            retrained_columns(site.model.acceptances.get(c), {}).get("retrained")
                        ),
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


def _write_cells(site: Site) -> None:
    tracks_of = site.model.cell_tracks()
    repo_url = site.common["build"]["repo_url"]
    shipped = shipped_grids()
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
            traffic_underived=traffic_underived(site.model.acceptances.get(r.cell_id)),
            method_file=method_file(r.method),
            bytes_text=fmt_bytes(r.comm.bytes_up + r.comm.bytes_down),
            bytes_client=fmt_bytes(bytes_per_client(r)),
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
            commands=cell_commands(r.grid, r.cell_id, r.seed, shipped),
            commit_url=commit_url(r.env.git_sha, repo_url),
            machine=r.env.machine or f"{r.env.device} (model not recorded)",
            env_json=json.dumps(to_plain(r.env), indent=2, sort_keys=True, ensure_ascii=False),
        )


def _write_partitions(site: Site) -> None:
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
            alpha_text=fmt_alpha(alpha_of(part.get("name"), part.get("params"))),
            digests=views,
            partition_seed=recs[0].cell.get("partition_seed"),
            num_clients=sorted(
                {(r.cell.get("fl") or {}).get("num_clients") for r in recs}, key=str
            ),
        )


def _write_misc(
    site: Site,
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
        submitted=model.submitted,
        unranked=UNRANKED,
        scope=records_scope(model),
        records_file=RECORDS_FILE,
    )
    site.page("legend.html", "legend.html", reference_points=model.config.reference_points)
    if model.submitted:  # only when an accepted bundle carried a plugin task's card
        site.page("submitted.html", "submitted.html", cards=model.submitted, unranked=UNRANKED)
    _write_compare(site)
    _write_submit(site)
    site.page(
        "changes.html",
        "changes.html",
        entries=results_changelog(model, site.summarized),
        n_records=len(model.records),
    )


SUBMIT_DOC = "docs/adding-a-method.md"
# the submit page's opening checklist: (section of SUBMIT_DOC, step, its command, what else it takes)
SUBMIT_STEPS = (
    (1, "Write the method", "", "one class subclassing MethodBase, here or in a plugin package"),
    (4, "Check it", "python -m benchmark check-method NAME", "and the conformance test"),
    (5, "Run the grid", "", "the track's grid, for at least the track's min_seeds seeds"),
    (7, "Bundle the records", "python -m benchmark submit RUNS --track TRACK --out BUNDLE", ""),
    (
        7,
        "Open a pull request",
        "",
        "with the code and the bundle; the maintainers' python -m benchmark accept re-evaluates "
        "the records and adds them to results/: only then are they on the leaderboard",
    ),
)


def submit_checklist(text: str) -> list[dict[str, str]]:
    """The five steps from writing a method to its rows on the board, each linking to the section of
    SUBMIT_DOC that explains it (no link when the document has no such section)."""
    anchors = {
        title.split(".", 1)[0]: mdtext.heading_anchor(title)
        for level, title in mdtext.headings(text)
        if level == 2 and title.split(".", 1)[0].isdigit()
    }
    return [
        {
            "step": step,
            "command": command,
            "what": what,
            "section": str(n),
            "anchor": anchors.get(str(n), ""),
        }
        for n, step, command, what in SUBMIT_STEPS
    ]


def _write_submit(site: Site) -> None:
    """The "Submit your method" page: docs/adding-a-method.md rendered (raw HTML escaped, relative
    links into the repository at the build's commit), opened by a checklist of its steps."""
    path = site.model.repo / SUBMIT_DOC
    text = (
        path.read_text(encoding="utf-8")
        if path.exists()
        else f"*{SUBMIT_DOC} is not in this checkout.*"
    )
    blob = blob_base(site.model.build)
    site.page(
        "submit.html",
        "submit.html",
        body=mdtext.block(text, blob_base=blob, source_dir="docs"),
        steps=submit_checklist(text),
        source=SUBMIT_DOC,
        source_url=f"{blob}/{SUBMIT_DOC}" if blob else None,
    )


def _write_compare(site: Site) -> None:
    """compare.html: every pair's differences, inline (no request for data: it works from
    file://), the default pair drawn without JavaScript."""
    data = compare_data(site.model.tracks)
    pair = default_pair(data) or (0, 1)
    site.page(
        "compare.html",
        "compare.html",
        data=data,
        data_json=json.dumps(data, sort_keys=True, separators=(",", ":")),
        a=pair[0],
        b=pair[1],
        rows=pair_rows(data, *pair) if len(data["configs"]) > 1 else [],
    )
