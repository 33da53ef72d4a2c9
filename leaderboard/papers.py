"""The papers behind the registered methods (``papers.yaml``, next to this file): typed, frozen,
strictly loaded.

Each method page names its own paper from here (authors, venue, year, arXiv link and a BibTeX entry
generated from the same fields) and links the method's reference page in ``docs/methods/``;
reference points that no paper defines say so in their ``note``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from benchmark.records.reference import PLUGIN_PAPERS, plugin_reference_dirs

DEFAULT_PAPERS = Path(__file__).with_name("papers.yaml")


class PapersError(ValueError):
    """papers.yaml is malformed: an unknown key, a missing field or a method naming an unknown
    paper."""


@dataclass(frozen=True, kw_only=True)
class Paper:
    key: str
    title: str
    authors: tuple[str, ...]
    venue: str
    short_venue: str
    year: int
    arxiv: str
    kind: str  # "inproceedings" or "preprint"

    @property
    def url(self) -> str:
        return f"https://arxiv.org/abs/{self.arxiv}"

    @property
    def cite(self) -> str:
        """``Lubana et al., ICML 2022``."""
        lead = self.authors[0].split()[-1]
        who = (
            lead
            if len(self.authors) == 1
            else (
                f"{lead} and {self.authors[1].split()[-1]}"
                if len(self.authors) == 2
                else f"{lead} et al."
            )
        )
        return f"{who}, {self.short_venue} {self.year}"

    def bibtex(self) -> str:
        """A BibTeX entry built from the fields above (never typed by hand, so it cannot disagree
        with them)."""
        key = f"{_ascii(self.authors[0].split()[-1]).lower()}{self.year}{self.key}"
        body = {
            "title": "{" + self.title + "}",
            "author": " and ".join(self.authors),
            "year": str(self.year),
        }
        if self.kind == "inproceedings":
            kind, body["booktitle"] = "inproceedings", self.venue
        else:
            kind, body["journal"] = "article", f"arXiv preprint arXiv:{self.arxiv}"
        body["eprint"], body["archivePrefix"], body["url"] = self.arxiv, "arXiv", self.url
        lines = ",\n".join(f"  {k} = {{{v}}}" for k, v in body.items())
        return f"@{kind}{{{key},\n{lines}\n}}"


@dataclass(frozen=True, kw_only=True)
class MethodPapers:
    method: str
    papers: tuple[Paper, ...]
    docs: str  # the method's reference page, relative to the repository root
    note: str = ""


def _ascii(text: str) -> str:
    return re.sub(r"[^A-Za-z]", "", text)


_PAPER_KEYS = {f.name for f in fields(Paper)} - {"key"}
_METHOD_KEYS = {"papers", "docs", "note"}


def _strict(raw: Any, known: set[str], required: set[str], where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise PapersError(f"{where}: must be a mapping")
    unknown, missing = set(raw) - known, required - set(raw)
    if unknown or missing:
        raise PapersError(
            f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}"
        )
    return raw


def parse_papers(raw: Any, where: str = "<memory>") -> dict[str, MethodPapers]:
    """method name → its papers and reference page. Raises :class:`PapersError` on anything
    unexpected."""
    top = _strict(raw, {"papers", "methods"}, {"papers", "methods"}, where)
    papers: dict[str, Paper] = {}
    for key, p in (top["papers"] or {}).items():
        p = _strict(p, _PAPER_KEYS, _PAPER_KEYS, f"{where}: papers.{key}")
        if p["kind"] not in ("inproceedings", "preprint"):
            raise PapersError(f"{where}: papers.{key}.kind must be inproceedings or preprint")
        papers[key] = Paper(
            key=key,
            title=str(p["title"]),
            authors=tuple(str(a) for a in p["authors"]),
            venue=str(p["venue"]),
            short_venue=str(p["short_venue"]),
            year=int(p["year"]),
            arxiv=str(p["arxiv"]),
            kind=str(p["kind"]),
        )
    out: dict[str, MethodPapers] = {}
    for name, m in (top["methods"] or {}).items():
        m = _strict(m, _METHOD_KEYS, {"papers", "docs"}, f"{where}: methods.{name}")
        unknown = [k for k in m["papers"] or [] if k not in papers]
        if unknown:
            raise PapersError(f"{where}: methods.{name} names unknown papers {unknown}")
        if not (m["papers"] or m.get("note")):
            raise PapersError(f"{where}: methods.{name} has no paper: its note must say why")
        out[name] = MethodPapers(
            method=name,
            papers=tuple(papers[k] for k in m["papers"] or []),
            docs=str(m["docs"]),
            note=str(m.get("note") or "").strip(),
        )
    return out


def load_papers(path: Path | None = None) -> dict[str, MethodPapers]:
    path = Path(path) if path is not None else DEFAULT_PAPERS
    return parse_papers(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))


def plugin_papers() -> dict[str, MethodPapers]:
    """The papers installed plugins declare: a ``papers.yaml`` (this file's schema) in the package
    a plugin names in the ``fssl_bench.references`` entry-point group, beside its reference tables.
    Found without importing the plugin; a malformed file is left out (the method page then says
    its paper is not listed)."""
    out: dict[str, MethodPapers] = {}
    dirs, _ = plugin_reference_dirs()
    for folder in dirs:
        path = folder / PLUGIN_PAPERS
        if not path.is_file():
            continue
        try:
            found = load_papers(path)
        except (OSError, yaml.YAMLError, PapersError, TypeError, ValueError):
            continue
        for name, mine in found.items():
            out.setdefault(name, mine)
    return out


def all_papers() -> dict[str, MethodPapers]:
    """leaderboard/papers.yaml, then what plugins declare for methods it does not list (a plugin
    cannot rename a built-in method's paper)."""
    return {**plugin_papers(), **load_papers()}
