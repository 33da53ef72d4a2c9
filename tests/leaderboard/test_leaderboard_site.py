"""The built site as a whole: every number links to the runs behind it, every internal link
resolves, no absolute local path, raw records and configurations published, CSV downloads, build
date and commit, hardware, favicon."""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag

import pytest

from benchmark.records.schema import from_json
from leaderboard.build import REPO
from leaderboard.site import build_site
from tests.leaderboard.lb_factory import MACHINE, showcase_records, write_raw, write_records

URL = "https://git.example.org/team/fssl-bench"


class _Links(HTMLParser):
    """Hrefs and srcs, and for every numeric table cell (td.num) whether its text sits inside a
    link."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.num_cells: list[tuple[str, bool]] = []  # (text, linked)
        self._cell: list[str] | None = None
        self._linked = False
        self._in_a = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("href", "src"):
            if a.get(key):
                self.refs.append(a[key])
        if tag == "td":
            self._cell, self._linked = (
                ([] if "num" in (a.get("class") or "").split() else None),
                False,
            )
        if tag == "a":
            self._in_a += 1

    def handle_endtag(self, tag):
        if tag == "a":
            self._in_a -= 1
        if tag == "td" and self._cell is not None:
            self.num_cells.append(("".join(self._cell).strip(), self._linked))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
            if self._in_a and re.search(r"\d", data):
                self._linked = True


def _parse(page: Path) -> _Links:
    p = _Links()
    p.feed(page.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("site")
    write_records(tmp / "results", showcase_records())
    write_raw(tmp / "results", "cut.json", "{")
    build_site([tmp / "results"], tmp / "site", repo_url=URL)
    return tmp / "site"


def test_every_internal_link_resolves(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    checked = 0
    for page in pages:
        for ref in _parse(page).refs:
            target, _ = urldefrag(ref)
            if not target or target.startswith(("https://", "mailto:")):
                continue
            assert not target.startswith(("http:", "//", "/")), (page, ref)
            assert (page.parent / target).resolve().is_file(), (page.relative_to(site), ref)
            checked += 1
    assert checked > 500


@pytest.mark.parametrize(
    "page", ["datasets/cifar10.html", "tracks/cifar10-knn.html", "tracks/cifar10-linear.html"]
)
def test_every_number_in_a_summary_or_track_table_is_a_link(site: Path, page: str) -> None:
    text = (site / page).read_text()
    # the summary page opens with the answer tables, then its summary table: check all of them
    tables = re.findall(r'<table class="sortable.*?</table>', text, flags=re.DOTALL)
    main = next(t for t in tables if 'id="summary-table"' in t or 'id="track-table"' in t)
    for table in [main, *(t for t in tables if "answer-table" in t)]:
        numeric = [
            (t, linked) for t, linked in _parse_fragment(table).num_cells if re.search(r"\d", t)
        ]
        assert len(numeric) >= (10 if table is main else 2)
        assert all(linked for _, linked in numeric), [t for t, linked in numeric if not linked]


def _parse_fragment(html: str) -> _Links:
    p = _Links()
    p.feed(html)
    return p


def test_summary_links_lead_to_the_seeds_behind_the_number(site: Path) -> None:
    text = (site / "datasets" / "cifar10.html").read_text()
    m = re.search(
        r'href="\.\./entries/([0-9a-f]+\.html)" title="orchestra · kNN · iid · best">75\.50</a>',
        text,
    )
    assert m, "orchestra's IID kNN mean (75.50, the column's best) links to its entry page"
    entry = (site / "entries" / m.group(1)).read_text()
    for seed_value in ("75.00", "75.50", "76.00"):  # golden per-seed values (KNN_VALUES)
        assert f">{seed_value}</a>" in entry
    assert entry.count('href="../cells/') >= 6 and MACHINE in entry
    assert '<td class="num best' in text  # the best of a column is marked


def test_cell_page_links_raw_record_config_tracks_and_commit(site: Path) -> None:
    rec = next(
        r for r in showcase_records() if r.method == "orchestra" and r.partition_label == "iid"
    )
    page = (site / "cells" / f"{rec.cell_id}.html").read_text()
    assert f'href="{rec.cell_id}.json"' in page and f'href="{rec.cell_id}.cell.json"' in page
    from benchmark.records.integrity import seal

    # the raw record, published
    assert from_json((site / "cells" / f"{rec.cell_id}.json").read_text()) == seal(rec)
    assert json.loads((site / "cells" / f"{rec.cell_id}.cell.json").read_text()) == json.loads(
        json.dumps(rec.cell)
    )
    assert (
        'href="../tracks/cifar10-knn.html"' in page
        and 'href="../tracks/cifar10-linear.html"' in page
    )
    assert MACHINE in page
    # "abc123" is not a full commit id: shown, never linked; a real sha links to the repository
    assert "abc123" in page and f"{URL}/commit/abc123" not in page
    footer_sha = re.search(r'href="' + re.escape(URL) + r'/commit/([0-9a-f]{40})"', page)
    assert footer_sha, "the site's own commit links to the repository when --repo-url is given"
    assert re.search(r"Built \d{4}-\d\d-\d\d \d\d:\d\d UTC", page)


def test_no_absolute_local_path_anywhere(site: Path) -> None:
    roots = {str(site.parent), str(REPO), str(Path.home())}
    for path in site.rglob("*"):
        if path.is_file() and path.suffix in (".html", ".json", ".csv"):
            text = path.read_text(encoding="utf-8")
            assert not [r for r in roots if r in text], path
    skipped = (site / "skipped.html").read_text()
    assert "results/records/v1/broken/cut.json" in skipped


def test_csv_downloads_beside_data_json(site: Path) -> None:
    index = (site / "index.html").read_text()
    for name in ("tracks", "summaries", "margins", "paper-pairs"):
        assert f'href="csv/{name}.csv"' in index and (site / "csv" / f"{name}.csv").exists()
    rows = list(csv.DictReader(io.StringIO((site / "csv" / "tracks.csv").read_text())))
    orchestra = next(
        r
        for r in rows
        if r["track"] == "cifar10-knn"
        and r["method"] == "orchestra"
        and r["partition_short"] == "IID"
    )
    assert (
        float(orchestra["mean"]) == 75.5
        and orchestra["rank"] == "1"
        and orchestra["fl_rounds"] == "100"
    )
    assert json.loads(orchestra["values"]) == [75.0, 75.5, 76.0]
    margins = list(csv.DictReader(io.StringIO((site / "csv" / "margins.csv").read_text())))
    fedavg = next(
        r for r in margins if r["method"] == "fedavg_simclr" and r["partition_label"] == "iid"
    )
    assert (
        float(fedavg["margin"]) == pytest.approx(71.0 - 80.0)
        and fedavg["baseline"] == "no_pretrain"
    )
    per_track = list(csv.DictReader(io.StringIO((site / "csv" / "cifar10-linear.csv").read_text())))
    assert {r["track"] for r in per_track} == {"cifar10-linear"} and len(per_track) >= 3
    data = json.loads((site / "data.json").read_text())
    assert data["build"]["repo_url"] == URL and data["summaries"]


def test_favicon_legend_and_bytes_definition(site: Path) -> None:
    assert (site / "static" / "favicon.svg").read_text().startswith("<svg")
    track = (site / "tracks" / "cifar10-knn.html").read_text()
    assert 'rel="icon"' in track and "static/favicon.svg" in track
    for words in ("group", "incomplete", "reported", "divided by the number of clients K"):
        assert words in track
    assert 'data-sort-first="descending"' in track  # higher-is-better columns sort best first


def test_method_page_cites_each_paper_once_and_renders_the_readme_as_markdown(site: Path) -> None:
    page = (site / "methods" / "orchestra.html").read_text()
    readme = page[page.index("From methods/README.md") : page.index(">Results</h2>")]
    # Markdown rendered, not shown raw
    assert "<code>orchestra</code>" in readme and "`" not in readme
    assert f'href="{URL}/blob/' in readme  # the README's relative link points into the repository
    source = "Orchestra: Unsupervised Federated Learning via Globally Consistent Clustering"
    # the method's own paper (papers.yaml) in the header and its BibTeX; the reference numbers'
    # heading
    assert page.count(source) == 3
    assert 'href="https://arxiv.org/abs/2205.11506"' in page
    assert "@inproceedings{lubana2022orchestra" in page


def test_the_repository_results_folder_builds(repo_site) -> None:
    """The site CI publishes: built from the repository's results/. With records in results/records
    its summary tables must not be empty; either way the build succeeds and every page renders."""
    results = REPO / "results"
    site, _ = repo_site  # build_site([results], ...), once for the session's tests that read it
    index = site / "index.html"
    assert index.exists() and (site / "references.html").exists()
    has_records = (
        any((results / "records").rglob("*.json")) if (results / "records").exists() else False
    )
    data = json.loads((site / "data.json").read_text())
    if has_records:
        assert data["summaries"], "records in results/records but no summary table"
        summaries = list((site / "datasets").glob("*.html"))
        assert summaries and all("entries/" in p.read_text() for p in summaries)
