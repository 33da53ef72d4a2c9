"""Method pages and the references page: a method's source, its ``# DEVIATION`` comments, its own
paper(s), its row of methods/README.md, its results on every track, and the paper-reported numbers
grouped by paper. View models only; :mod:`leaderboard.pages` writes them.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.core.canonical import to_plain
from benchmark.core.deviations import deviations as parse_deviations_of
from benchmark.core.deviations import parse_deviations
from benchmark.records.acceptance_files import PLUGIN_FILE_REVIEW_BYTES
from benchmark.records.reference import ReferenceTable, ReferenceValue
from benchmark.records.schema import ResultRecord
from leaderboard import mdtext
from leaderboard.build import SiteModel
from leaderboard.formatting import (
    blob_base,
    commit_url,
    fmt_bytes,
    method_file,
    safe_url,
    short_source,
    slug,
)
from leaderboard.loading import plugin_provenance, submitted
from leaderboard.papers import MethodPapers, all_papers
from leaderboard.view_models import ref_dataset, ref_view, track_rows_for


def method_sources(repo: Path) -> dict[str, Path]:
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


NO_PAPER = (
    "not listed in leaderboard/papers.yaml; a plugin names its paper in a papers.yaml beside its "
    "reference tables (docs/adding-a-method.md §6)"
)


def own_papers(name: str, blob: str | None, papers: Mapping[str, MethodPapers]) -> dict[str, Any]:
    """A method's own paper(s) (papers.yaml, or the papers.yaml a plugin ships), its reference page
    and, for a reference point that no paper defines, the note saying so."""
    mine = papers.get(name)
    if mine is None:
        return {"papers": [], "docs": None, "docs_url": None, "note": NO_PAPER}
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
        "docs_url": safe_url(mine.docs) or (f"{blob}/{mine.docs}" if blob else None),
        "note": mine.note,
    }


def _papers(refs: Sequence[ReferenceValue]) -> list[dict[str, Any]]:
    """Reference numbers grouped by paper, then by table: each paper is cited once."""
    by_source: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for v in refs:
        by_source[v.source][v.table].append({**ref_view(v), "dataset": ref_dataset(v)})
    return [
        {
            "source": src,
            "tables": [{"table": t, "entries": e} for t, e in tables.items()],
            "n": sum(len(e) for e in tables.values()),
        }
        for src, tables in by_source.items()
    ]


def paper_key(table: ReferenceTable) -> str:
    """The paper a reference table transcribes: its file name up to ``_table``
    (``fedmae_table1.yaml`` → ``fedmae``), the paper's key in papers.yaml."""
    return table.path.stem.split("_table")[0]


def own_reference_values(
    name: str, tables: Sequence[ReferenceTable], papers: Mapping[str, MethodPapers]
) -> tuple[list[ReferenceValue], int]:
    """The numbers a method's own paper(s) print for it, and how many numbers other papers print
    for it (FedMAE's Table 1 reports FedU and FedEMA: those are FedMAE's runs of them, not FedU's or
    FedEMA's paper)."""
    mine = papers.get(name)
    keys = {p.key for p in mine.papers} if mine is not None else {name}
    own, others = [], 0
    for t in tables:
        values = [v for v in t.values if v.method == name]
        if paper_key(t) in keys:
            own += values
        else:
            others += len(values)
    return own, others


@dataclass(frozen=True)
class MethodSource:
    """Where a method's code is read from: a file of this repository, or the installed file of the
    plugin module its records name (``env.plugins``)."""

    path: Path | None
    shown: str | None  # the path as the page prints it
    url: str | None
    deviations: list[dict[str, str]]
    plugin: bool = False


def plugin_module_file(module: str) -> tuple[Path, str] | None:
    """The installed source file of a plugin's module and its path from the package's folder
    (``fssl_fedfoo/method.py``), found without importing it (a plugin's package imports torch; the
    site never does). None when it is not installed here."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return (Path(spec.origin), Path(spec.origin).name) if spec.origin else None
    for loc in spec.submodule_search_locations or []:
        for cand in (Path(loc, *rest).with_suffix(".py"), Path(loc, *rest, "__init__.py")):
            if cand.is_file():
                return cand, cand.relative_to(Path(loc).parent).as_posix()
    return None


def method_source(
    name: str,
    recs: Sequence[ResultRecord],
    sources: Mapping[str, Path],
    repo: Path,
    blob: str | None,
) -> MethodSource:
    """A built-in method's file in methods/, else the installed file of the plugin module its
    records name; its ``# DEVIATION`` comments either way."""
    src = sources.get(name)
    if src is not None:
        rel = src.relative_to(repo)
        return MethodSource(src, str(rel), f"{blob}/{rel}" if blob else None, deviations(src, repo))
    modules = [str(p["module"]) for p in plugin_provenances(recs) if p.get("module")]
    found = plugin_module_file(modules[0]) if modules else None
    if found is None:
        return MethodSource(None, None, None, [], plugin=bool(modules))
    path, shown = found
    devs = [{"where": f"{shown}:{d.line}", "text": d.text} for d in parse_deviations_of(path)]
    return MethodSource(path, shown, None, devs, plugin=True)


def plugin_provenances(recs: Sequence[ResultRecord]) -> list[Mapping[str, Any]]:
    """The distinct provenances (distribution, version, source digest, ...) a plugin method's
    records name, in record order."""
    out: list[Mapping[str, Any]] = []
    for r in recs:
        prov = plugin_provenance(r)
        if prov is not None and prov not in out:
            out.append(prov)
    return out


def provenance_rows(recs: Sequence[ResultRecord]) -> list[dict[str, Any]]:
    """A plugin method's provenance for its page: one row per distinct (distribution, version,
    source digest) its records ran."""
    return [
        {
            "distribution": p.get("distribution") or "not installed (imported from a path)",
            "version": p.get("version") or "—",
            "source_digest": p.get("source_digest") or "—",
            "module": p.get("module") or "—",
            "url": safe_url(p.get("url")),
            "commit": p.get("commit"),
            "n": sum(plugin_provenance(r) == p for r in recs),
        }
        for p in plugin_provenances(recs)
    ]


SHA = re.compile(r"[0-9a-f]{7,40}")
# a source file read back from git is bounded like any input: a method file is far smaller
MAX_SOURCE_BYTES = 2_000_000


def _git(repo: Path, *args: str) -> str | None:
    """``git -C repo args`` (its stdout), or None when git, the repository or the object is not
    there. Only called with shas that match :data:`SHA` (a record's ``env.git_sha`` is input)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 or len(done.stdout) > MAX_SOURCE_BYTES:
        return None
    try:
        return done.stdout.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _full_sha(repo: Path, sha: str) -> str | None:
    out = _git(repo, "rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}")
    return out.strip() if out and SHA.fullmatch(out.strip()) else None


def record_commits(
    recs: Sequence[ResultRecord], rel: str, repo: Path, build: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The commits a method's records were made at (``env.git_sha``), most records first, each with
    the link to the method's file at that commit and what changed in the file between it and the
    build's commit: lines added and deleted (``git diff --numstat``) and the link to the diff.
    ``known`` is False for a commit this checkout does not hold (then nothing is said about
    changes); ``changed`` is None when the file is the same."""
    counts = Counter(str(r.env.git_sha or "") for r in recs)
    head = str(build.get("commit") or "")
    head_full = _full_sha(repo, head) if SHA.fullmatch(head) else None
    url = str(build.get("repo_url") or "")
    out = []
    for sha, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        entry: dict[str, Any] = {
            "sha": sha,
            "short": sha[:12] if sha else "not recorded",
            "n": n,
            "url": None,
            "known": False,
            "changed": None,
            "text": None,
        }
        if not SHA.fullmatch(sha):
            out.append(entry)
            continue
        if commit_url(sha, url):
            entry["url"] = f"{url}/blob/{sha}/{rel}"
        full = _full_sha(repo, sha)
        text = _git(repo, "show", f"{full}:{rel}") if full else None
        entry["known"] = text is not None
        entry["text"] = text
        if text is not None and head_full and head_full != full:
            stat = _git(repo, "diff", "--numstat", full, head_full, "--", rel) or ""
            added = deleted = 0
            for line in stat.splitlines():
                parts = line.split("\t")
                if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
                    added, deleted = added + int(parts[0]), deleted + int(parts[1])
            if added or deleted:
                entry["changed"] = {
                    "added": added,
                    "deleted": deleted,
                    "head": head[:12],
                    "url": f"{url}/compare/{sha}...{head}" if commit_url(head, url) else None,
                }
        out.append(entry)
    return out


def ran_deviations(
    commits: Sequence[Mapping[str, Any]], rel: str, fallback: Sequence[Mapping[str, str]]
) -> tuple[list[dict[str, str]], str | None]:
    """The ``# DEVIATION`` comments of the code that ran: parsed from the method's file at the
    commit most of its records were made at, each linked to its line there; the checkout's
    (``fallback``) when that commit is not in this checkout. Returns (deviations, the sha read)."""
    first = next((c for c in commits if c.get("text") is not None), None)
    if first is None:
        return [dict(d) for d in fallback], None
    base = first["url"]
    devs = [
        {
            "where": f"{rel}:{d.line}",
            "text": d.text,
            "url": f"{base}#L{d.line}" if base else "",
        }
        for d in parse_deviations(first["text"])
    ]
    return devs, first["sha"]


@dataclass(frozen=True)
class _Shared:
    """What every method page reads: sources, reference tables, papers, the repository link."""

    sources: Mapping[str, Path]
    tables: Sequence[ReferenceTable]
    papers: Mapping[str, MethodPapers]
    blob: str | None


def method_pages(model: SiteModel, track_files: Mapping[str, str]) -> list[dict[str, Any]]:
    by_method: dict[str, list[ResultRecord]] = defaultdict(list)
    for _, r in model.records:
        by_method[r.method].append(r)
    shared = _Shared(
        sources=method_sources(model.repo),
        tables=model.references,
        papers=all_papers(),
        blob=blob_base(model.build),
    )
    return [
        method_page(model, shared, name, by_method[name], track_files) for name in sorted(by_method)
    ]


def _configs(recs: Sequence[ResultRecord]) -> list[dict[str, Any]]:
    configs: Counter[tuple[str, str]] = Counter()
    for r in recs:
        params = (r.cell.get("method") or {}).get("params", {})
        configs[(r.method_version, json.dumps(to_plain(params), indent=2, sort_keys=True))] += 1
    return [{"version": v, "json": j, "n": n} for (v, j), n in configs.most_common()]


def method_page(
    model: SiteModel,
    shared: _Shared,
    name: str,
    recs: Sequence[ResultRecord],
    track_files: Mapping[str, str],
) -> dict[str, Any]:
    """One method's page: its paper, source, deviations, README row, results and configurations."""
    results = [
        {**row, "track": tt.track.title, "track_file": track_files[tt.track.id]}
        for tt in model.tracks
        for row in track_rows_for(tt, name)
    ]
    mine, others = own_reference_values(name, shared.tables, shared.papers)
    src = method_source(name, recs, shared.sources, model.repo, shared.blob)
    commits = (
        record_commits(recs, src.shown, model.repo, model.build)
        if src.shown and not src.plugin
        else []
    )
    devs, devs_at = (
        ran_deviations(commits, src.shown, src.deviations) if commits else (src.deviations, None)
    )
    readme = [
        (k, mdtext.inline(v, blob_base=shared.blob, source_dir="methods"))
        for k, v in _readme_row(model.repo, name)
    ]
    return {
        "name": name,
        "file": method_file(name),
        "n_records": len(recs),
        "reference_point": model.config.reference_points.get(name),
        "versions": sorted({r.method_version for r in recs}),
        "papers": _papers(mine),
        "n_references": len(mine),
        "n_other_references": others,
        "own": own_papers(name, shared.blob, shared.papers),
        "datasets": sorted({r.dataset for r in recs}),
        "ref_datasets": sorted({ref_dataset(v) for v in mine} - {"—"}),
        "commit": model.build.get("commit", ""),
        "source": src.shown,
        "source_url": src.url,
        "plugin": src.plugin,
        "provenance": provenance_rows(recs),
        "submitted": sum(submitted(r) for r in recs),
        "deviations": devs,
        "deviations_at": devs_at[:12] if devs_at else None,
        "record_commits": [{k: v for k, v in c.items() if k != "text"} for c in commits],
        "readme": readme,
        "results": results,
        "configs": _configs(recs),
        "plugin_files": plugin_files(recs, model.acceptances),
        "review_text": f"{PLUGIN_FILE_REVIEW_BYTES:,} bytes",
    }


def _file_rows(files: Any) -> tuple[tuple[str, int], ...]:
    """(path, bytes) pairs of one distribution's listing; anything else in it is left out."""
    good = (
        f
        for f in (files if isinstance(files, list) else [])
        if isinstance(f, list) and len(f) == 2 and isinstance(f[1], int) and f[1] >= 0
    )
    return tuple((str(path), size) for path, size in good)


def plugin_files(
    recs: Sequence[ResultRecord], acceptances: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Every non-code file of the method's plugin distributions with its size, as ``accept`` listed
    them in its acceptances (``training.plugin_files``: what the box cannot hide, issue 60 item 3),
    one entry per distinct listing with the number of accepted cells behind it; a file above
    ``PLUGIN_FILE_REVIEW_BYTES`` is marked for a reviewer."""
    listings: Counter[tuple[str, tuple[tuple[str, int], ...]]] = Counter()
    for r in recs:
        training = (acceptances.get(r.cell_id) or {}).get("training")
        listed = training.get("plugin_files") if isinstance(training, Mapping) else None
        for dist, files in listed.items() if isinstance(listed, Mapping) else ():
            listings[(str(dist), _file_rows(files))] += 1
    return [
        {
            "distribution": dist,
            "cells": n,
            "files": [
                {
                    "path": path,
                    "bytes": size,
                    "size": f"{size:,} B" if size < 1000 else f"{fmt_bytes(size)} ({size:,} B)",
                    "review": size > PLUGIN_FILE_REVIEW_BYTES,
                }
                for path, size in rows
            ],
        }
        for (dist, rows), n in sorted(listings.items())
    ]


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
    known = {p.key: p for m in all_papers().values() for p in m.papers}
    by_paper: dict[str, list[Any]] = defaultdict(list)
    for t in model.references:
        by_paper[paper_key(t)].append(t)
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
                        "entries": [{**ref_view(v), "dataset": ref_dataset(v)} for v in t.values],
                    }
                    for t in tables
                ],
            }
        )
    return out
