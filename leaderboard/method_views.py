"""Method pages and the references page: a method's source, its ``# DEVIATION`` comments, its own
paper(s), its row of methods/README.md, its results on every track, and the paper-reported numbers
grouped by paper. View models only; :mod:`leaderboard.pages` writes them.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.core.canonical import to_plain
from benchmark.core.deviations import deviations as parse_deviations_of
from benchmark.records.reference import ReferenceValue
from benchmark.records.schema import ResultRecord
from leaderboard import mdtext
from leaderboard.build import SiteModel
from leaderboard.formatting import blob_base, method_file, short_source, slug
from leaderboard.papers import MethodPapers, load_papers
from leaderboard.views import ref_dataset, ref_view, track_rows_for


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


def method_pages(model: SiteModel, track_files: Mapping[str, str]) -> list[dict[str, Any]]:
    by_method: dict[str, list[ResultRecord]] = defaultdict(list)
    for _, r in model.records:
        by_method[r.method].append(r)
    sources = method_sources(model.repo)
    refs = [v for t in model.references for v in t.values]
    blob = blob_base(model.build)
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
                "ref_datasets": sorted({ref_dataset(v) for v in mine} - {"—"}),
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
                        "entries": [{**ref_view(v), "dataset": ref_dataset(v)} for v in t.values],
                    }
                    for t in tables
                ],
            }
        )
    return out
