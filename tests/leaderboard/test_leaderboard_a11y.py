"""Accessibility of the built site in a real browser (Debian's chromium, .ci/install-browser.sh):
axe-core (vendored, tests/leaderboard/fixtures/axe) finds no serious or critical violation on one
page of every kind, at 1400 and 400 px; the filters are toggle buttons that Space presses; the
compare page works from file:// and shows the paired difference the Python side computes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from leaderboard.build import REPO, build_model
from leaderboard.compare import compare_data, pair_rows
from tests.leaderboard.test_leaderboard_browser import WIDTHS, _network, _resize

pytestmark = pytest.mark.browser

AXE = Path(__file__).parent / "fixtures" / "axe"
AXE_VERSION = "4.14.1"
AXE_SHA256 = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c"
SERIOUS = ("serious", "critical")

RUN_AXE = """
var done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ["violations"]}).then(function (r) {
  done(r.violations.map(function (v) {
    return {id: v.id, impact: v.impact, help: v.help, n: v.nodes.length,
            where: v.nodes.slice(0, 3).map(function (x) { return x.target.join(" "); })};
  }));
}).catch(function (e) { done([{id: "axe-error", impact: "critical", help: String(e), n: 0, where: []}]); });
"""


def test_the_vendored_axe_is_the_pinned_release() -> None:
    script = (AXE / "axe.min.js").read_bytes()
    assert hashlib.sha256(script).hexdigest() == AXE_SHA256
    assert script.startswith(f"/*! axe v{AXE_VERSION}".encode())
    assert (AXE / "LICENSE").read_text().startswith("Mozilla Public License, version 2.0")


def _one_of_each_kind(out: Path) -> list[str]:
    """One page per template: the pages that exist in every build, then the first of each folder."""
    pages = [
        "index.html",
        "compare.html",
        "references.html",
        "submit.html",
        "legend.html",
        "changes.html",
        "skipped.html",
    ]
    for folder, pick in (
        ("datasets", "digits.html"),
        ("tracks", "digits-quickstart-knn.html"),
        ("methods", "orchestra.html"),
        ("entries", None),
        ("cells", None),
        ("partitions", None),
    ):
        files = sorted(p.name for p in (out / folder).glob("*.html"))
        assert files, f"no {folder} page"
        pages.append(f"{folder}/{pick if pick in files else files[0]}")
    return pages


def test_no_serious_axe_violation_on_any_kind_of_page(repo_site, driver) -> None:
    out, base = repo_site
    axe = (AXE / "axe.min.js").read_text(encoding="utf-8")
    driver.set_script_timeout(120)
    found = []
    for width in WIDTHS:
        _resize(driver, width)
        for page in _one_of_each_kind(out):
            driver.get(f"{base}/{page}")
            driver.execute_script(axe)
            for v in driver.execute_async_script(RUN_AXE):
                if v["impact"] in SERIOUS:
                    found.append(
                        f"{page} at {width} px: {v['id']} ({v['impact']}, {v['n']} "
                        f"nodes: {v['where']}): {v['help']}"
                    )
    assert not found, "\n".join(found)


def test_space_presses_a_filter_button(repo_site, driver) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _, base = repo_site
    _resize(driver, 1400)
    driver.get(f"{base}/datasets/digits.html")
    iid = driver.find_element(
        By.CSS_SELECTOR, 'a.filter[data-filter="partition"][data-value="IID"]'
    )
    assert iid.get_attribute("role") == "button"
    assert iid.get_attribute("aria-pressed") == "false"
    y = driver.execute_script("return window.scrollY")
    iid.send_keys(Keys.SPACE)
    assert iid.get_attribute("aria-pressed") == "true"
    assert driver.execute_script("return window.scrollY") == y  # Space did not scroll
    heads = driver.find_elements(By.CSS_SELECTOR, "#summary-table thead tr:nth-child(2) th")
    assert {th.text for th in heads if th.is_displayed()} == {"IID"}
    iid.send_keys(Keys.SPACE)
    assert iid.get_attribute("aria-pressed") == "false"


def test_the_compare_page_works_from_file_and_agrees_with_the_python_side(
    repo_site, driver, artifacts_dir: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    out, _ = repo_site
    data = compare_data(build_model([REPO / "results"]).tracks)
    labels = [c["label"] for c in data["configs"]]
    a, b = labels.index("orchestra"), labels.index("fedavg_simclr")
    want = [
        [f"{r['dataset']} {r['track']} {r['partition']}", r["delta"], r["ci"], r["test"]]
        for r in pair_rows(data, a, b)
    ]
    # issue 54: orchestra's 3.6x optimizer steps travel with the pair (its track flag)
    flagged = [
        f"{f['side']} not like for like"
        for r in pair_rows(data, a, b)
        for f in r["flags"]
        if f["label"] == "orchestra"
    ]
    assert flagged and all(f.startswith("A ") for f in flagged)
    assert want
    _resize(driver, 1400)
    driver.get((out / "compare.html").as_uri())  # no server: file://
    Select(driver.find_element(By.ID, "compare-a")).select_by_visible_text("orchestra")
    Select(driver.find_element(By.ID, "compare-b")).select_by_visible_text("fedavg_simclr")
    rows = driver.find_elements(By.CSS_SELECTOR, "#compare-body tr")
    got = [
        [td.text for i, td in enumerate(r.find_elements(By.TAG_NAME, "td")) if i in (0, 2, 3, 6)]
        for r in rows
    ]
    assert got == want
    verdicts = [r.find_element(By.CSS_SELECTOR, "td.verdict").text for r in rows]
    assert sum("A not like for like" in v for v in verdicts) == len(flagged)
    # at 400 px the verdict and its flags are on screen, not a column past the right edge
    _resize(driver, 400)
    width = driver.execute_script("return document.documentElement.clientWidth")
    for cell in driver.find_elements(By.CSS_SELECTOR, "#compare-body td.verdict"):
        box = driver.execute_script("return arguments[0].getBoundingClientRect()", cell)
        assert cell.is_displayed() and 0 <= box["left"] and box["right"] <= width, box
    driver.save_screenshot(str(artifacts_dir / "leaderboard_compare_400.png"))
    _resize(driver, 1400)
    assert "#a=orchestra&b=fedavg_simclr" in driver.current_url
    driver.save_screenshot(str(artifacts_dir / "leaderboard_compare.png"))
    urls, _ = _network(driver)
    network = [u for u in urls if u.split(":", 1)[0] in ("http", "https", "ws", "wss", "ftp")]
    assert not network, network  # every number is in the page: nothing is fetched
    # a method page links here with its method picked
    driver.get((out / "methods" / "flesd.html").as_uri())
    driver.find_element(By.PARTIAL_LINK_TEXT, "Compare flesd").click()
    chosen = Select(driver.find_element(By.ID, "compare-a")).first_selected_option.text
    assert chosen == "flesd"
