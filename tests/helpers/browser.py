"""Debian's chromium, headless, driven by selenium through Debian's chromedriver.

Used by the browser tests, `docs/make_screenshot.py` and the HTML benchmark. Chromium
running as root needs --no-sandbox; every network feature is turned off so a report that
tried to fetch anything would show up as a console error rather than a silent download.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync",
    "--disable-extensions", "--disable-default-apps", "--window-size=1400,1000",
)


def find_chromium() -> str | None:
    """Path of chromium (Debian) or google-chrome, if installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@contextlib.contextmanager
def chromium_driver(chromium: str, chromedriver: str) -> Iterator[Any]:
    """A headless selenium Chrome driver with a fresh profile and browser console logging."""
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium-manager must never try to download a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="preflight-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_ready(driver: Any, timeout_s: float = 30.0) -> str:
    """Wait until the report's script has drawn every figure; returns the data-ready value."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout_s).until(
        lambda d: d.execute_script("return document.documentElement.getAttribute('data-ready')"))
    return driver.execute_script("return document.documentElement.getAttribute('data-ready')")


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """Browser console entries at SEVERE level since the last call."""
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]


def full_page_screenshot(driver: Any, path: str, width: int = 1400, max_height: int = 6000) -> None:
    """Resize the window to the page's height (capped) and save a PNG."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(int(height) + 120, 600), max_height))
    driver.save_screenshot(path)


# JavaScript both geometry tests start from: an element's box, whether two boxes overlap, and the
# <text> elements of an SVG drawn (partly) outside it: a label cut off.
GEOMETRY_JS = """
    function box(el) { var r = el.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom}; }
    function overlaps(a, b) { return a.l < b.r - 1 && b.l < a.r - 1 && a.t < b.b - 1 && b.t < a.b - 1; }
    function textsCutOff(svg) {
        var s = box(svg);
        return Array.prototype.filter.call(svg.querySelectorAll('text'), function (t) {
            var b = box(t);
            return b.l < s.l - 1 || b.r > s.r + 1 || b.t < s.t - 1 || b.b > s.b + 1;
        }).map(function (t) { return t.textContent; });
    }
"""
