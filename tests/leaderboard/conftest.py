"""The browser tests' shared pieces: one headless chromium per test module, handed to each test as a
fresh one would be, and the site built from results/ once per session (both only read it)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def repo_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The site CI publishes, built from results/, served locally: (folder, base URL)."""
    from leaderboard.build import REPO
    from leaderboard.site import build_site
    from tests.leaderboard.test_leaderboard_browser import _served

    out = tmp_path_factory.mktemp("repo-site") / "site"
    build_site([REPO / "results"], out)
    with _served(out) as served:
        yield served


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One chromium for the module's tests: starting one costs about 2 s of CPU, and a test checks
    pages, not the browser's start (``driver`` resets it between tests)."""
    from tests.leaderboard.test_leaderboard_browser import _driver

    profile = tmp_path_factory.mktemp("profile")
    driver = _driver(profile)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture()
def driver(browser: Any) -> Any:
    """The module's chromium as a new one starts: a blank page at its window size (no viewport
    override), no cookie, stored data or cached file, an empty network log, the default script
    timeout; an alert or a window a failed test left open is closed first, so its failure stays
    its own."""
    from selenium.common.exceptions import NoAlertPresentException

    try:
        browser.switch_to.alert.dismiss()
    except NoAlertPresentException:
        pass
    first, *others = browser.window_handles
    for handle in others:
        browser.switch_to.window(handle)
        browser.close()
    browser.switch_to.window(first)
    browser.get("about:blank")
    browser.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": "*", "storageTypes": "all"})
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    browser.execute_cdp_cmd("Network.clearBrowserCache", {})
    browser.execute_cdp_cmd("Network.clearBrowserCookies", {})
    browser.set_script_timeout(30)
    browser.get_log("performance")  # read and so emptied: the test sees only its own requests
    return browser
