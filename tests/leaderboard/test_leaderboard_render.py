"""Rendering: every record field is escaped (checked on the parsed DOM), unsafe links dropped, file
names slugged."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path

from benchmark.records.integrity import seal
from benchmark.records.schema import EnvInfo, TrackingRef, to_json
from leaderboard.formatting import safe_url, slug
from leaderboard.site import build_site
from tests.leaderboard.lb_factory import make_record, standard_records, write_records

EVIL = "<script>alert(1)</script>"


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.hrefs: list[str] = []
        self.text: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag == "script":
            self.scripts.append(a)
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])

    def handle_data(self, data):
        self.text.append(data)


def _dom(path: Path) -> _Dom:
    d = _Dom()
    d.feed(path.read_text(encoding="utf-8"))
    return d


def _evil_records() -> list:
    evil_cell = {"lr": EVIL, "note": "<img src=x onerror=alert(3)>"}
    evil_label = dataclasses.replace(
        make_record("orchestra", alpha=0.5, seed=0, value=70.0), partition_label=EVIL
    )
    return (
        standard_records()
        + [
            # a method name is a slug where records are read (issue 33): markup in it is refused
            # (the skipped page), so the markup rides in every other field of this method's records
            make_record(
                "evil",
                alpha=0.1,
                seed=s,
                value=50.0 + s,
                method_params=evil_cell,
                machine=EVIL,
                tracking=TrackingRef(url="javascript:alert(2)", run_id=EVIL),
            )
            for s in range(3)
        ]
        + [
            make_record(
                "fedu",
                alpha=0.5,
                seed=0,
                value=1.0,
                tracking=TrackingRef(entity="me", project="p", run_id="r1", mode="online"),
            ),
            # a second configuration of fedu whose label (its varying parameter) is markup
            make_record(
                "fedu", alpha=0.1, seed=0, value=2.0, method_params={"lr": EVIL, "tau": 0.5}
            ),
            dataclasses.replace(
                make_record("orchestra", alpha=0.5, seed=1, value=71.0),
                env=EnvInfo(git_sha=EVIL, machine=EVIL, hostname=EVIL),
            ),
            evil_label,
        ]
    )


def _build(tmp_path: Path, repo_url: str | None = None) -> Path:
    write_records(tmp_path / "res", _evil_records())
    # written by hand: no writer takes it
    markup = seal(make_record(EVIL, alpha=0.1, seed=0, value=50.0))
    folder = tmp_path / "res" / "records" / "v1" / "x"
    folder.mkdir(parents=True)
    (folder / f"{markup.cell_id}.json").write_text(to_json(markup))
    build_site([tmp_path / "res"], tmp_path / "site", repo_url=repo_url)
    return tmp_path / "site"


def test_record_fields_render_as_text(tmp_path: Path) -> None:
    site = _build(tmp_path, repo_url="javascript:alert(4)")
    pages = sorted(site.rglob("*.html"))
    kinds = {p.parent.name for p in pages}
    assert {"tracks", "cells", "methods", "entries", "datasets", "partitions"} <= kinds and len(
        pages
    ) > 40
    seen: dict[str, int] = {}
    for page in pages:
        dom = _dom(page)
        # the only script elements on any page are our own sort.js and filter.js, loaded by src
        # (and compare.js on the compare page)
        srcs = [s.get("src", "") for s in dom.scripts]
        own = (["compare.js"] if page.name == "compare.html" else []) + ["sort.js", "filter.js"]
        assert [x.rsplit("/", 1)[-1] for x in srcs] == own, page
        assert all(x.startswith(("static/", "../static/")) for x in srcs), page
        # plots are inline SVG; an injected <img onerror> must stay text
        assert "img" not in dom.tags, page
        assert not [h for h in dom.hrefs if h.strip().lower().startswith("javascript")], page
        seen[page.parent.name] = seen.get(page.parent.name, 0) + "".join(dom.text).count(EVIL)
    # the markup appears as text on every kind of page: method name, variant label, machine,
    # partition label
    assert all(
        seen.get(k, 0) >= 1
        for k in ("tracks", "cells", "methods", "entries", "datasets", "partitions")
    ), seen
    raw = (site / "tracks" / "cifar10-knn.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in raw and EVIL not in raw


def test_method_file_names_are_slugs_and_wandb_links_are_safe(tmp_path: Path) -> None:
    site = _build(tmp_path)
    names = [p.name for p in (site / "methods").glob("*.html")]
    assert all("<" not in n and "/" not in n for n in names)
    assert "evil.html" in names and slug(EVIL) not in {n[:-5] for n in names}
    # the markup method is refused, with its reason
    assert "is not a valid name" in (site / "skipped.html").read_text()
    online = make_record("fedu", alpha=0.5, seed=0, value=1.0).cell_id
    page = (site / "cells" / f"{online}.html").read_text()
    assert 'href="https://wandb.ai/me/p/runs/r1"' in page


def test_safe_url() -> None:
    assert safe_url("https://wandb.ai/a/b/runs/c") == "https://wandb.ai/a/b/runs/c"
    assert safe_url("javascript:alert(1)") is None
    assert safe_url(" JaVaScRiPt:alert(1)") is None
    assert safe_url("data:text/html,hi") is None
    assert safe_url(None) is None


def test_plots_and_static_assets_are_local(tmp_path: Path) -> None:
    site = _build(tmp_path)
    text = (site / "tracks" / "cifar10-knn.html").read_text()
    # both plots are inline SVG: every point has a hover title and links to the page behind it
    for plot_id in ("comm-plot", "alpha-plot"):
        start = text.index(f'<svg id="{plot_id}"')
        svg = text[start : text.index("</svg>", start)]
        assert "<script" not in svg and svg.count("<title>") >= 9 and 'href="../entries/' in svg
    # the point title of the configuration whose label is markup, escaped
    assert "fedu (lr=&lt;script&gt;alert(1)&lt;/script&gt;) · Dir(0.1)" in text
    for page in [site / "index.html", *site.rglob("tracks/*.html"), *site.rglob("datasets/*.html")]:
        text = page.read_text()
        # links out (the repository, the papers) are fine; nothing the page loads may come from
        # elsewhere
        loads = re.findall(r"<(?:script|img|link|iframe|source)\b[^>]*>", text)
        assert not [tag for tag in loads if "//" in tag], page
        assert "//cdn" not in text and "url(http" not in text, page
    css = (site / "static" / "style.css").read_text()
    assert "@import" not in css and "url(" not in css


def test_deviation_comments_are_collected(tmp_path: Path) -> None:
    from leaderboard.method_views import deviations

    src = tmp_path / "methods" / "m.py"
    src.parent.mkdir()
    src.write_text(
        "x = 1\ny = 2  # DEVIATION: the paper does A;\n# we do B because C.\nz = 3\n# DEVIATION: other\n"
    )
    got = deviations(src, tmp_path)
    assert got == [
        {"where": "methods/m.py:2", "text": "the paper does A; we do B because C."},
        {"where": "methods/m.py:5", "text": "other"},
    ]


def test_cli_build_reports_skipped_and_never_stops(tmp_path: Path, capsys) -> None:
    from leaderboard.__main__ import main
    from tests.leaderboard.lb_factory import write_raw

    write_records(tmp_path / "res", standard_records())
    write_raw(tmp_path / "res", "cut.json", "{")
    assert main(["build", "--results", str(tmp_path / "res"), "--out", str(tmp_path / "site")]) == 0
    captured = capsys.readouterr()
    assert "cut.json" in captured.err and "1 skipped" in captured.out
    assert f"site: {(tmp_path / 'site' / 'index.html').resolve()}" in captured.out
