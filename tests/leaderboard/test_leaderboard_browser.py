"""The leaderboard in a real headless browser (Debian's chromium via selenium; DESIGN §7 "Browser test")."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from benchmark.records.schema import TrackingRef
from leaderboard.__main__ import make_server
from leaderboard.build import build_site
from tests.leaderboard.lb_factory import KNN_VALUES, make_record, standard_records, write_raw, write_records

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

pytestmark = pytest.mark.browser


def _driver(profile: Path):
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip("needs Debian's chromium and chromium-driver (.ci/install-browser.sh installs them)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (.ci/install-browser.sh)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
                 "--window-size=1400,1000"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)


@pytest.fixture()
def site(tmp_path: Path):
    records = standard_records() + [
        make_record("<script>alert(1)</script>", alpha=0.1, seed=0, value=50.0),
        make_record("fedema", alpha=1.0, seed=0, value=99.0, runner="someone-else"),
        make_record("fedema", alpha=1.0, seed=1, value=98.0, tracking=TrackingRef(url="javascript:alert(2)", run_id="x")),
    ]
    write_records(tmp_path / "results", records)
    write_raw(tmp_path / "results", "truncated.json", '{"schema_version": 1, "cell_id": "ab')
    out = tmp_path / "site"
    build_site([tmp_path / "results"], out)
    server = make_server(out, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield out, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_site_in_headless_chromium(site, tmp_path: Path, artifacts_dir: Path) -> None:
    from selenium.webdriver.common.by import By

    out, base = site
    driver = _driver(tmp_path / "profile")
    try:
        driver.get(f"{base}/index.html")
        assert "fssl-bench leaderboard" in driver.find_element(By.TAG_NAME, "h1").text
        assert driver.find_elements(By.CSS_SELECTOR, "#tracks-table tbody tr")
        driver.find_element(By.LINK_TEXT, "skipped records (1)")

        driver.get(f"{base}/tracks/cifar10-knn.html")
        table = driver.find_element(By.ID, "track-table")
        rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
        data = json.loads((out / "data.json").read_text())
        track = next(t for t in data["tracks"] if t["id"] == "cifar10-knn")
        assert len(rows) == len(track["rows"])
        text = table.text
        for method in ("fedavg_simclr", "orchestra", "fedu"):
            assert method in text
        assert "75.50 ± 0.50" in text  # orchestra IID, golden mean ± std
        assert "62.00 ± 2.00" in text  # fedavg_simclr α=0.1
        assert "incomplete: 61.00, 62.00" in text  # fedu α=0.1 has two of three seeds
        assert "missing" in text  # the injected method has only α=0.1: its other partitions are missing
        assert "unverified" in text

        # the script-named method renders as text, and no script ran
        assert "<script>alert(1)</script>" in text
        assert not driver.find_elements(By.XPATH, "//tbody//script")
        assert driver.execute_script("return window.__pwned === undefined")

        # the plot is present and loaded
        img = driver.find_element(By.ID, "alpha-plot")
        assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", img)

        # sorting: click the "seeds" header, then the mean header twice; the order changes and is sorted
        def column(idx: int) -> list[str]:
            return [r.find_elements(By.TAG_NAME, "td")[idx].get_attribute("data-sort") or ""
                    for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]

        def methods() -> list[str]:
            return [r.find_elements(By.TAG_NAME, "td")[0].text for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]

        before = methods()
        header = table.find_elements(By.CSS_SELECTOR, "thead th")[3]
        header.click()
        asc = [float(v) for v in column(3) if v]
        assert asc == sorted(asc) and methods() != before
        header.click()
        desc = [float(v) for v in column(3) if v]
        assert desc == sorted(desc, reverse=True)
        assert header.get_attribute("aria-sort") == "descending"
        driver.save_screenshot(str(artifacts_dir / "leaderboard_track.png"))

        # cell page: the javascript: link from the record is not a link
        cell = next(r for r in track["rows"] if r["method"] == "fedema")["cell_ids"]
        for cell_id in cell:
            driver.get(f"{base}/cells/{cell_id}.html")
            assert not [a for a in driver.find_elements(By.TAG_NAME, "a")
                        if (a.get_attribute("href") or "").startswith("javascript")]
        driver.get(f"{base}/skipped.html")
        assert "truncated.json" in driver.find_element(By.ID, "skipped-table").text

        # nothing left the local server
        urls = []
        for entry in driver.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg.get("method") == "Network.requestWillBeSent":
                urls.append(msg["params"]["request"]["url"])
        network = [u for u in urls if u.split(":", 1)[0] in ("http", "https", "ws", "wss", "ftp")]
        assert network and all(u.startswith(base + "/") for u in network), network
        assert any(u.endswith("/plots/cifar10-knn.svg") for u in network)
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "profile", ignore_errors=True)


def test_fixture_values_are_golden() -> None:
    assert KNN_VALUES[("orchestra", None)] == [75.0, 75.5, 76.0]
