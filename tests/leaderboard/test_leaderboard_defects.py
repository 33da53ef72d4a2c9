"""The site's defects of issue 40, each read where a reader meets it: the submit page's tables and
hand-off, README cells with line breaks, the Dec-SSL title, a method's own papers only, the track
page's leader, the plots, a plugin method's page and the smoke track's place in "who leads"."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path

import pytest
import yaml

from benchmark.records.reference import load_references
from leaderboard import mdtext
from leaderboard.build import REPO
from leaderboard.method_views import paper_key
from leaderboard.papers import load_papers
from leaderboard.plots import LABEL_GAP, Point, alpha_plot, comm_plot
from leaderboard.site import build_site
from tests.leaderboard.lb_factory import make_record, showcase_records, write_records


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("defects")
    write_records(tmp / "results", showcase_records())
    build_site([tmp / "results"], tmp / "site")
    return tmp / "site"


def page(site: Path, rel: str) -> str:
    return (site / rel).read_text(encoding="utf-8")


# -------------------------------------------------------------------------------------------------
# submit.html


def test_every_table_of_the_submit_page_scrolls_in_its_own_box(site: Path) -> None:
    text = page(site, "submit.html")
    article = text[text.index('<article class="markdown">') :]
    tables = [m.start() for m in re.finditer(r"<table\b", article)]
    assert tables, "docs/adding-a-method.md has tables (§7, §9)"
    for start in tables:
        before = article[:start].rstrip()
        assert re.search(
            r'<div class="scroll" tabindex="0" role="region" aria-label="[^"]+">$', before
        ), article[start - 120 : start]


def test_the_submit_page_opens_with_a_checklist_that_ends_in_accept(site: Path) -> None:
    text = page(site, "submit.html")
    items = [
        (anchor, step, re.sub(r"<[^>]+>", "", what))
        for anchor, step, what in re.findall(
            r"<li><strong><a href=\"#([^\"]+)\">([^<]+)</a></strong>: (.*?) <span", text
        )
    ]
    assert len(items) == 5, items
    for anchor, _, _ in items:
        assert f'id="{anchor}"' in text, anchor  # each step links to its section
    assert text.index('id="checklist"') < text.index('<article class="markdown">')
    last = items[-1][1] + items[-1][2]
    assert "pull request" in last and "benchmark accept" in last
    assert "submit" in items[3][2]


def test_the_banner_and_section_7_agree_on_how_a_record_enters_the_board(site: Path) -> None:
    banner = page(site, "submit.html").split('<p class="note">', 1)[1].split("</p>", 1)[0]
    assert "once it passes" not in banner
    assert "pull request" in banner and "python -m benchmark accept" in banner


def test_headings_get_githubs_anchors() -> None:
    html = mdtext.block(
        "## 4. Conformance: `python -m benchmark check-method NAME`\n\n## A\n\n## A\n"
    )
    assert 'id="4-conformance-python--m-benchmark-check-method-name"' in html
    assert 'id="a"' in html and 'id="a-1"' in html


# -------------------------------------------------------------------------------------------------
# method pages: README cells, papers


def test_a_readme_cell_line_break_is_a_line_break_and_other_html_stays_escaped() -> None:
    html = str(mdtext.inline("one<br>two <br/> <b>three</b>"))
    assert html.count("<br>") == 2 and "&lt;br" not in html
    assert "&lt;b&gt;three&lt;/b&gt;" in html


def test_orchestras_page_shows_no_literal_br(site: Path) -> None:
    text = page(site, "methods/orchestra.html")
    readme = text.split('class="kv readme"', 1)[1].split("</table>", 1)[0]
    assert "&lt;br&gt;" not in readme and "<br>" in readme


def test_every_reference_table_names_its_papers_true_title() -> None:
    known = {p.key: p for m in load_papers().values() for p in m.papers}
    tables, bad = load_references(REPO / "results" / "reference")
    assert not bad
    checked = 0
    for t in tables:
        paper = known.get(paper_key(t))
        if paper is not None:
            assert paper.title in t.source, (t.path.name, t.source, paper.title)
            checked += 1
    assert checked >= 4  # the Dec-SSL tables at least


def test_a_method_page_lists_only_its_own_papers_numbers(site: Path) -> None:
    fedu = page(site, "methods/fedu.html")
    # FedMAE's Table 1 reports FedU (FedMAE's runs of it): not FedU's paper's numbers
    assert "Numbers from its own paper (0)" in fedu
    assert "FedMAE" not in fedu.split("Numbers from its own paper", 1)[1].split("<h2", 1)[0]
    assert "Other papers print 12 numbers" in fedu
    orchestra = page(site, "methods/orchestra.html")
    own = orchestra.split("Numbers from its own paper", 1)[1].split("<h2", 1)[0]
    assert "Orchestra: Unsupervised Federated Learning" in own and "FedMAE" not in own


# -------------------------------------------------------------------------------------------------
# track pages, index


def test_the_leader_of_a_track_pool_is_bold(site: Path) -> None:
    text = page(site, "tracks/cifar10-knn.html")
    table = text.split('id="track-table"', 1)[1].split("</table>", 1)[0]
    best = re.findall(r'<td class="num best" data-sort="[^"]*"><a [^>]*>([^<]+)</a>', table)
    # one leader per partition pool with two or more ranked cells (IID, α=1; α=0.1 too)
    assert len(best) >= 2, best
    css = (REPO / "leaderboard" / "static" / "style.css").read_text()
    assert re.search(r"td\.best\s*\{[^}]*font-weight:\s*700", css)


def test_the_flags_column_is_not_forced_wider_than_the_scroller() -> None:
    css = (REPO / "leaderboard" / "static" / "style.css").read_text()
    widths = re.findall(r"#track-table td\.flags\s*\{[^}]*min-width:\s*([\d.]+)rem", css)
    assert all(float(w) <= 12 for w in widths), widths


def test_a_track_marked_not_a_result_names_no_leader(tmp_path: Path) -> None:
    tracks = tmp_path / "tracks.yaml"
    base = {"dataset": "cifar10", "task": "knn", "card": "knn@v1", "min_seeds": 3}
    base["federation"] = {"num_clients": 100, "participation": 0.1}
    tracks.write_text(
        yaml.safe_dump(
            {
                "tracks": [
                    {"id": "real", "title": "real", "label": "real kNN", **base},
                    {
                        "id": "check",
                        "title": "check",
                        "label": "check kNN",
                        "result": False,
                        **base,
                    },
                ]
            }
        )
    )
    write_records(tmp_path / "results", showcase_records())
    build_site([tmp_path / "results"], tmp_path / "site", tracks_path=tracks)
    index = page(tmp_path / "site", "index.html")
    leads = index.split('<section id="results">', 1)[1].split("</section>", 1)[0]
    assert "tracks/real.html" in leads
    assert "tracks/check.html" not in leads
    assert "tracks/check.html" in index  # still listed among the tracks


# -------------------------------------------------------------------------------------------------
# plots


def _points(n_series: int, alphas: tuple[float, ...]) -> list[Point]:
    return [
        Point(series=f"m{i}", x=a, y=50 + i * 0.1 + j, title="", partition=f"p{j}")
        for i in range(n_series)
        for j, a in enumerate(alphas)
    ]


def test_the_heterogeneity_plot_needs_three_alphas() -> None:
    assert alpha_plot(_points(13, (0.1, float("inf"))), "y") is None
    assert alpha_plot(_points(13, (0.1, 1.0, float("inf"))), "y") is not None


def test_thirteen_series_differ_by_more_than_colour_and_are_named_at_their_ends() -> None:
    plot = alpha_plot(_points(13, (0.1, 1.0, float("inf"))), "y")
    looks = {(s["colour"], s["shape"]) for s in plot.series}
    assert len(looks) == 13
    shapes = [s["shape"] for s in plot.series]
    assert all(a != b for a, b in zip(shapes, shapes[1:]))  # neighbours (FedU, FedEMA) differ
    ys = sorted(s["label"]["y"] for s in plot.series)
    assert all(b - a >= LABEL_GAP - 0.05 for a, b in zip(ys, ys[1:]))
    assert all(s["label"]["x"] > plot.box[2] for s in plot.series)
    comm = comm_plot(_points(13, (4e6, 4e6)), "y", str)
    assert all("label" in s for s in comm.series)


def test_a_two_alpha_track_says_why_it_has_no_heterogeneity_plot(site: Path) -> None:
    text = page(site, "tracks/cifar10-linear.html")  # linear probe: IID and α = 0.1 only
    assert 'id="alpha-plot"' not in text
    assert 'id="alpha-plot-note"' in text


# -------------------------------------------------------------------------------------------------
# a plugin method


PLUGIN_SOURCE = textwrap.dedent(
    '''
    """A fake plugin method (never imported by the site)."""
    import torch  # noqa: F401

    # DEVIATION: the fake plugin departs from its fake paper here
    X = 1
    '''
)


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site built with an installed plugin method's records, once for the two tests that only
    read its pages (the plugin's source, paper and provenance are read while the site is built,
    under the patches, which are undone before the tests run)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _plugin_site(tmp_path_factory.mktemp("plugin-site"), monkeypatch)


def _plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pkg = tmp_path / "path" / "fssl_fake_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('the site must not import a plugin')\n")
    (pkg / "method.py").write_text(PLUGIN_SOURCE)
    refs = tmp_path / "path" / "fssl_fake_refs"
    refs.mkdir()
    (refs / "papers.yaml").write_text(
        yaml.safe_dump(
            {
                "papers": {
                    "fakepaper": {
                        "title": "A Fake Paper",
                        "authors": ["Ada Lovelace", "Alan Turing"],
                        "venue": "Fake Conference",
                        "short_venue": "FC",
                        "year": 2024,
                        "arxiv": "2401.00001",
                        "kind": "inproceedings",
                    }
                },
                "methods": {"fake": {"papers": ["fakepaper"], "docs": "https://example.org/fake"}},
            }
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path / "path"))
    from benchmark.records import reference

    monkeypatch.setattr(reference, "plugin_reference_dirs", lambda: ([refs], []))
    from leaderboard import papers

    monkeypatch.setattr(papers, "plugin_reference_dirs", lambda: ([refs], []))
    prov = {
        "module": "fssl_fake_plugin.method",
        "distribution": "fssl-fake-plugin",
        "version": "0.1.0",
        "source_digest": "d" * 64,
        "files": 2,
    }
    records = []
    for seed, value in enumerate((71.0, 72.0, 73.0)):
        r = make_record("fake", seed=seed, value=value)
        records.append(
            dataclasses.replace(r, env=dataclasses.replace(r.env, plugins={"method:fake": prov}))
        )
    write_records(tmp_path / "results", showcase_records() + records)
    build_site([tmp_path / "results"], tmp_path / "site")
    return tmp_path / "site"


def test_a_plugin_methods_page_reads_its_installed_source_paper_and_provenance(
    plugin_site: Path,
) -> None:
    text = page(plugin_site, "methods/fake.html")
    assert "the fake plugin departs from its fake paper here" in text
    assert "fssl_fake_plugin/method.py:5" in text
    assert "No <code># DEVIATION</code> comment" not in text
    assert "A Fake Paper" in text and "not listed in leaderboard/papers.yaml" not in text
    assert "fssl-fake-plugin" in text and "0.1.0" in text and "d" * 64 in text
    assert 'id="submitted"' in text


def test_a_plugin_methods_track_rows_say_its_settings_were_not_tuned_here(
    plugin_site: Path,
) -> None:
    table = page(plugin_site, "tracks/cifar10-knn.html").split('id="track-table"', 1)[1]
    rows = table.split("</table>", 1)[0].split("<tr ")
    fake = [r for r in rows if 'data-f-method="fake"' in r]
    others = [r for r in rows if 'data-f-method="orchestra"' in r]
    assert fake and all("settings not tuned here" in r for r in fake)
    assert others and not any("settings not tuned here" in r for r in others)


def test_every_own_paper_number_names_its_dataset(tmp_path: Path) -> None:
    """FedMAE's tables state the evaluation and pre-training datasets, not ``dataset``: its page
    shows them (never "—"), the pre-training dataset beside the evaluated one."""
    write_records(tmp_path / "results", [make_record("fedmae", seed=s) for s in range(3)])
    build_site([tmp_path / "results"], tmp_path / "site")
    text = page(tmp_path / "site", "methods/fedmae.html")
    own = text.split("Numbers from its own paper", 1)[1].split("<h2", 1)[0]
    rows = re.findall(r'<tr class="reported">(.*?)</tr>', own, flags=re.DOTALL)
    assert rows
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, flags=re.DOTALL) for r in rows]
    assert not [c for c in cells if "—" in c], "a number without its dataset"
    assert any("cifar10 (pre-trained on mini_imagenet)" in c for c in cells)
