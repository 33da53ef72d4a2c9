"""The leaderboard in a real headless browser (Debian's chromium via selenium; docs/design.md §7
"Browser test").

Screenshots of the index, a summary table, a track, a method and a cell page at 1400 and 400 px are
saved as test artefacts. On every one of them: nothing scrolls sideways at the document level (wide
tables scroll in their own box), every number in a summary or track table is a link to a page of the
site, nothing is requested outside the local server and nothing 404s (favicon included).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

from benchmark.records.schema import TrackingRef
from leaderboard.__main__ import make_server
from leaderboard.build import REPO
from leaderboard.site import build_site
from tests.leaderboard.lb_factory import (
    KNN_VALUES,
    make_record,
    showcase_records,
    write_raw,
    write_records,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTHS = (1400, 400)

pytestmark = pytest.mark.browser


def _driver(profile: Path):
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(
            "needs Debian's chromium and chromium-driver (.ci/install-browser.sh installs them)"
        )
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="needs selenium (.ci/install-browser.sh)"
    )
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1400,1000",
        "--hide-scrollbars",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)


@contextlib.contextmanager
def _served(out: Path):
    """The built site at ``out`` served locally for the block: (folder, base URL)."""
    server = make_server(out, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield out, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def site(tmp_path: Path):
    records = showcase_records() + [
        # a method name is a slug where records are read (issue 33): the markup rides in the
        # machine model, which the track table shows
        make_record("evil", alpha=0.1, seed=0, value=50.0, machine="<script>alert(1)</script>"),
        make_record("fedema", alpha=1.0, seed=0, value=99.0, runner="someone-else"),
        make_record(
            "fedema",
            alpha=1.0,
            seed=1,
            value=98.0,
            tracking=TrackingRef(url="javascript:alert(2)", run_id="x"),
        ),
    ]
    write_records(tmp_path / "results", records)
    write_raw(tmp_path / "results", "truncated.json", '{"schema_version": 1, "cell_id": "ab')
    out = tmp_path / "site"
    build_site([tmp_path / "results"], out)
    with _served(out) as served:
        yield served


def _resize(driver, width: int) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
    )


def _check_page(driver, base: str, out: Path, path: str, width: int, artifacts: Path) -> None:
    """No sideways scroll of the document; every number of a summary/track table inside a link to a
    site page."""
    from selenium.webdriver.common.by import By

    _resize(driver, width)
    driver.get(f"{base}/{path}")
    scroll, client = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll <= client, f"{path} at {width} px scrolls sideways ({scroll} > {client})"
    for table_id in ("summary-table", "track-table"):
        for td in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} td.num"):
            text = td.text.strip()
            if not any(ch.isdigit() for ch in text):
                continue
            links = td.find_elements(By.TAG_NAME, "a")
            assert links, f"{path}: number {text!r} is not a link"
            for a in links:
                url = urlparse(a.get_attribute("href"))
                assert f"{url.scheme}://{url.netloc}" == base, (path, text, url)
                assert (out / url.path.lstrip("/")).is_file(), (path, text, url.path)
    height = min(driver.execute_script("return document.documentElement.scrollHeight"), 8000)
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    name = path.replace("/", "_").removesuffix(".html")
    driver.save_screenshot(str(artifacts / f"leaderboard_{name}_{width}.png"))


def _network(driver) -> tuple[list[str], list[tuple[str, int]]]:
    urls, statuses = [], []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
        elif msg.get("method") == "Network.responseReceived":
            statuses.append(
                (msg["params"]["response"]["url"], int(msg["params"]["response"]["status"]))
            )
    return urls, statuses


def test_pages_at_two_widths_link_every_number_and_never_scroll_sideways(
    site, driver, artifacts_dir: Path
) -> None:
    from selenium.webdriver.common.by import By

    out, base = site
    cell = next(r for r in showcase_records() if r.method == "orchestra").cell_id
    pages = [
        "index.html",
        "datasets/cifar10.html",
        "tracks/cifar10-knn.html",
        "methods/orchestra.html",
        f"cells/{cell}.html",
        "submit.html",  # its tables scroll in their own box (issue 40: 424 px wide at 400 px)
    ]
    for width in WIDTHS:
        for path in pages:
            _check_page(driver, base, out, path, width, artifacts_dir)
    _resize(driver, 1400)
    # the whole track table, flags column included, fits its box at 1400 px (issue 40)
    driver.get(f"{base}/tracks/cifar10-knn.html")
    box = driver.find_element(By.ID, "track-table").find_element(By.XPATH, "..")
    inner, outer = driver.execute_script(
        "return [arguments[0].scrollWidth, arguments[0].clientWidth]", box
    )
    assert inner <= outer, f"the track table is {inner} px wide in a {outer} px box"
    driver.get(f"{base}/datasets/cifar10.html")
    summary = driver.find_element(By.ID, "summary-table")
    assert summary.find_elements(By.CSS_SELECTOR, "tbody td.num a")  # a non-empty summary table
    assert "75.50" in summary.text and "Reference points, not ranked" in summary.text
    urls, statuses = _network(driver)
    network = [u for u in urls if u.split(":", 1)[0] in ("http", "https", "ws", "wss", "ftp")]
    assert network and all(u.startswith(base + "/") for u in network), network
    assert any(u.endswith("/static/favicon.svg") for u in network)
    assert not [s for s in statuses if s[1] >= 400], [s for s in statuses if s[1] >= 400]


def test_track_page_rows_sorting_and_escaping(site, driver, artifacts_dir: Path) -> None:
    from selenium.webdriver.common.by import By

    out, base = site
    driver.get(f"{base}/index.html")
    assert "fssl-bench leaderboard" in driver.find_element(By.TAG_NAME, "h1").text
    assert driver.find_elements(By.CSS_SELECTOR, "#tracks-table tbody tr")
    driver.find_element(By.LINK_TEXT, "skipped records (1)")

    driver.get(f"{base}/tracks/cifar10-knn.html")
    table = driver.find_element(By.ID, "track-table")
    rows = table.find_elements(By.CSS_SELECTOR, "tbody tr:not(.group-head)")
    data = json.loads((out / "data.json").read_text())
    track = next(t for t in data["tracks"] if t["id"] == "cifar10-knn")
    assert len(rows) == len(track["rows"])
    text = table.text
    for method in ("fedavg_simclr", "orchestra", "fedu", "no_pretrain", "central_ssl"):
        assert method in text
    assert "75.50 ± 0.50" in text  # orchestra IID, golden mean ± std
    assert "62.00 ± 2.00" in text  # fedavg_simclr α=0.1
    assert "incomplete: 61.00, 62.00" in text  # fedu α=0.1 has two of three seeds
    # the injected method has only α=0.1: its other partitions are missing
    assert "missing" in text
    assert "unverified" in text
    # reference points sit in their own block and have no rank
    refs = table.find_element(By.CSS_SELECTOR, "tbody.refs")
    assert "no_pretrain" in refs.text and "vit_tiny" in refs.text  # two backbones, named
    assert all(
        r.find_elements(By.TAG_NAME, "td")[5].text == "—"
        for r in refs.find_elements(By.CSS_SELECTOR, "tr:not(.group-head)")
    )

    # the script-named machine renders as text, and no script ran
    assert "<script>alert(1)</script>" in text
    assert not driver.find_elements(By.XPATH, "//tbody//script")
    assert driver.execute_script("return window.__pwned === undefined")

    # the plots are inline SVG whose points carry a hover title and a link
    for plot_id in ("comm-plot", "alpha-plot"):
        svg = driver.find_element(By.ID, plot_id)
        titles = svg.find_elements(By.TAG_NAME, "title")
        assert titles and any("orchestra" in t.get_attribute("textContent") for t in titles)

    # sorting the mean column: best first (higher is better), then reversed; reference points
    # stay apart
    def column(idx: int) -> list[str]:
        body = table.find_elements(By.TAG_NAME, "tbody")[0]
        return [
            r.find_elements(By.TAG_NAME, "td")[idx].get_attribute("data-sort") or ""
            for r in body.find_elements(By.TAG_NAME, "tr")
        ]

    header = table.find_elements(By.CSS_SELECTOR, "thead th")[2]
    header.click()
    desc = [float(v) for v in column(2) if v]
    assert desc == sorted(desc, reverse=True) and desc[0] == 75.5
    assert header.get_attribute("aria-sort") == "descending"
    header.click()
    asc = [float(v) for v in column(2) if v]
    assert asc == sorted(asc)
    assert "Reference points" in table.find_element(By.CSS_SELECTOR, "tbody.refs tr").text
    driver.save_screenshot(str(artifacts_dir / "leaderboard_track.png"))

    # cell page: the javascript: link from the record is not a link
    cells = next(r for r in track["rows"] if r["method"] == "fedema")["cell_ids"]
    for cell_id in cells:
        driver.get(f"{base}/cells/{cell_id}.html")
        assert not [
            a
            for a in driver.find_elements(By.TAG_NAME, "a")
            if (a.get_attribute("href") or "").startswith("javascript")
        ]
    driver.get(f"{base}/skipped.html")
    assert "truncated.json" in driver.find_element(By.ID, "skipped-table").text

    urls, _ = _network(driver)
    network = [u for u in urls if u.split(":", 1)[0] in ("http", "https", "ws", "wss", "ftp")]
    assert network and all(u.startswith(base + "/") for u in network), network


def test_site_built_from_the_repository_results(repo_site, driver, tmp_path: Path) -> None:
    """What CI publishes: the site built from results/. When results/records holds records, its
    summary tables are non-empty in the browser; the index always renders and scrolls only
    vertically."""
    from selenium.webdriver.common.by import By

    out, base = repo_site  # built from results/ once for the session's browser tests
    for width in WIDTHS:
        _check_page(driver, base, out, "index.html", width, tmp_path)
    records = REPO / "results" / "records"
    if records.exists() and any(records.rglob("*.json")):
        links = driver.find_elements(By.CSS_SELECTOR, "#summaries a")
        assert links, "results/records holds records but the index lists no summary table"
        for href in [a.get_attribute("href") for a in links]:
            driver.get(href)
            assert driver.find_elements(By.CSS_SELECTOR, "#summary-table tbody td.num a")


def test_fixture_values_are_golden() -> None:
    assert KNN_VALUES[("orchestra", None)] == [75.0, 75.5, 76.0]


ANSWER_PAGES = ("index.html", "datasets/digits.html")
SIGNED = re.compile(r"^(?:[+−]\d+\.\d\d|0\.00)$")


def _answer_checks(driver, path: str, width: int) -> None:
    """The leader, its Δ to the runner-up and the margins over both random-init references are on
    screen, above the fold's tables (the summary table, the tracks list) rather than under them."""
    from selenium.webdriver.common.by import By

    answers = driver.find_elements(By.CSS_SELECTOR, "#results section.answer")
    assert answers, f"{path} at {width} px: no answer block"
    first = answers[0]
    leader = first.find_element(By.CSS_SELECTOR, ".leader")
    delta = first.find_element(By.CSS_SELECTOR, ".delta")
    assert leader.is_displayed() and leader.text.strip(), (path, width)
    assert delta.is_displayed() and SIGNED.match(delta.text.strip()), (path, width, delta.text)
    ci = first.find_element(By.CSS_SELECTOR, ".ci").text
    assert re.search(r"\[[+−]?\d+\.\d\d, [+−]?\d+\.\d\d\]", ci), (path, width, ci)
    for baseline in ("no_pretrain", "no_pretrain_bn"):
        cells = first.find_elements(By.CSS_SELECTOR, f'td.margin[data-baseline="{baseline}"]')
        shown = [
            c for c in cells if c.is_displayed() and SIGNED.match(c.text.split("\n")[0].strip())
        ]
        assert shown, f"{path} at {width} px: no margin over {baseline}"
        assert "[" in shown[0].text  # with its interval
    later = driver.find_elements(By.CSS_SELECTOR, "#summary-table, #tracks-table")
    assert later and first.location["y"] < later[0].location["y"], (path, width)


def _plot_text_px(driver) -> list[float]:
    """The rendered size of every text in the track's plots: font-size × (drawn width / viewBox
    width)."""
    return driver.execute_script("""
        var out = [];
        document.querySelectorAll("figure.plot svg[viewBox]").forEach(function (svg) {
          var scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
          svg.querySelectorAll("text").forEach(function (t) {
            out.push(parseFloat(getComputedStyle(t).fontSize) * scale);
          });
        });
        return out;""")


def test_the_answer_comes_first_and_plots_stay_legible(repo_site, driver) -> None:
    """Issue 31: on the site built from results/, at 1400 and 400 px, the index and the digits
    summary show the leader, its Δ to the runner-up and the paired margins over random init and
    calibrated random init; the plots' text is at least 10 px at 400 px; a partition header sorts
    (it does not navigate); a filter hides columns."""
    from selenium.webdriver.common.by import By

    out, base = repo_site
    # the shipped records are the digits quickstart: a site without its summary is a defect, not a skip
    assert (out / "datasets" / "digits.html").exists(), "results/ built no digits summary"
    for width in WIDTHS:
        _resize(driver, width)
        for path in ANSWER_PAGES:
            driver.get(f"{base}/{path}")
            _answer_checks(driver, path, width)
        driver.get(f"{base}/tracks/digits-quickstart-knn.html")
        sizes = _plot_text_px(driver)
        assert sizes and min(sizes) >= 10, (width, min(sizes or [0]))
    _resize(driver, 1400)
    driver.get(f"{base}/datasets/digits.html")
    table = driver.find_element(By.ID, "summary-table")
    second_row = table.find_elements(By.CSS_SELECTOR, "thead tr")[1]
    header = second_row.find_elements(By.TAG_NAME, "th")[0]
    header.click()
    assert driver.current_url.endswith("/datasets/digits.html")  # it sorted, not navigated
    assert header.get_attribute("aria-sort")
    col = int(header.get_attribute("data-col"))
    values = [
        r.find_elements(By.CSS_SELECTOR, "th, td")[col].get_attribute("data-sort")
        for r in table.find_elements(By.CSS_SELECTOR, "tbody:not(.refs) tr")
    ]
    numbers = [float(v) for v in values if v]
    assert numbers == sorted(numbers, reverse=True) and len(numbers) >= 2
    iid = driver.find_element(
        By.CSS_SELECTOR, 'a.filter[data-filter="partition"][data-value="IID"]'
    )
    iid.click()
    heads = table.find_elements(By.CSS_SELECTOR, "thead tr:nth-child(2) th")
    visible = [th.text for th in heads if th.is_displayed()]
    assert visible and set(visible) == {"IID"}
    assert driver.current_url.endswith("/datasets/digits.html")
    iid.click()
    assert len(
        [
            th
            for th in table.find_elements(By.CSS_SELECTOR, "thead tr:nth-child(2) th")
            if th.is_displayed()
        ]
    ) > len(visible)


RANK_COLUMN = 5  # the track table's rank column (0-based): method, partition, mean, CI, seeds, rank


def _ranked(rank_cell: str) -> bool:
    """Whether a rank cell holds a rank: its first line is the number (a note such as "on reported
    numbers" may follow it on the next line)."""
    first = rank_cell.strip().splitlines()[:1]
    return bool(first) and first[0].strip().isdigit()


def test_no_ranked_row_hides_its_flag_at_400_px(repo_site, driver, artifacts_dir: Path) -> None:
    """Issue 54: at 400 px the not-like-for-like flag is the 11th column of the track table, off
    screen while the rank is on it. Scrolled to its rank, every flagged ranked row shows its flag
    on screen (the badge in the sticky method cell); the summary's flagged rows show theirs too."""
    from selenium.webdriver.common.by import By

    _, base = repo_site
    _resize(driver, 400)
    driver.get(f"{base}/tracks/digits-quickstart-knn.html")
    width = driver.execute_script("return document.documentElement.clientWidth")
    flagged = [
        r
        for r in driver.find_elements(By.CSS_SELECTOR, "#track-table > tbody:not(.refs) > tr")
        if "not like for like" in r.find_element(By.CSS_SELECTOR, "td.flags").text
        and _ranked(r.find_elements(By.TAG_NAME, "td")[RANK_COLUMN].text)
    ]
    assert len(flagged) >= 4  # flesd and orchestra (budget, data), fedmae (backbone) ×2
    for row in flagged:
        rank = row.find_elements(By.TAG_NAME, "td")[RANK_COLUMN]
        driver.execute_script(
            "var box = arguments[0].closest('.scroll');"
            "box.scrollLeft = arguments[0].offsetLeft - 150;"
            "arguments[0].scrollIntoView({block: 'center', inline: 'nearest'});",
            rank,
        )
        r_box = driver.execute_script("return arguments[0].getBoundingClientRect()", rank)
        assert 0 <= r_box["left"] and r_box["right"] <= width, r_box
        badge = row.find_element(By.CSS_SELECTOR, ".narrow-flag")
        b_box = driver.execute_script("return arguments[0].getBoundingClientRect()", badge)
        assert badge.is_displayed() and 0 <= b_box["left"] and b_box["right"] <= width, b_box
    driver.save_screenshot(str(artifacts_dir / "leaderboard_track_flags_400.png"))
    driver.get(f"{base}/datasets/digits.html")
    rows = driver.find_elements(By.CSS_SELECTOR, "#summary-table > tbody:not(.refs) > tr")
    shown = [r for r in rows if r.find_elements(By.CSS_SELECTOR, ".narrow-flag")]
    assert shown and all(
        r.find_element(By.CSS_SELECTOR, ".narrow-flag").is_displayed() for r in shown
    )
