"""The HTML report in a real browser: Debian's chromium, headless, driven by selenium.

Opens the report of the real planted run (conftest.py), re-rendered with a probe table,
and checks what a person would see; keeps a screenshot in artifacts/ (git-ignored).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser import chromium_driver, console_errors, full_page_screenshot, wait_ready
from tests.helpers.tools import require_tool
from tests.reports.conftest import IMG_PAYLOAD, SCRIPT_PAYLOAD, PlantedRun

pytestmark = pytest.mark.browser
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    chromium = require_tool("chromium")
    chromedriver = require_tool("chromedriver")
    with chromium_driver(chromium, chromedriver) as browser:
        yield browser


@pytest.fixture(scope="module")
def page(driver: Any, planted_run: PlantedRun) -> Any:
    """The probed report, loaded and drawn; console errors collected at load."""
    driver.get(planted_run.probed_html.as_uri())
    ready = wait_ready(driver)
    driver.errors_at_load = console_errors(driver)
    driver.ready = ready
    ARTIFACTS.mkdir(exist_ok=True)
    full_page_screenshot(driver, str(ARTIFACTS / "report-planted-run.png"))
    driver.set_window_size(1400, 1000)
    return driver


def test_no_console_errors_and_every_chart_drew(page: Any) -> None:
    assert page.errors_at_load == []
    assert page.ready == "5"  # the matrix, plus two charts for each of dp and tp


def test_verdict_banner(page: Any) -> None:
    assert page.find_element("id", "verdict-text").text == "FAILED"
    banner = page.find_element("id", "verdict").text
    assert "exit code 3" in banner and "NCCL001" in banner


def test_charts_have_plot_elements_with_data(page: Any) -> None:
    for dim in (0, 1):
        counts = page.execute_script(f"""
            var groups = document.getElementById('pf-dim{dim}-groups'),
                sizes = document.getElementById('pf-dim{dim}-sizes');
            return [groups.data.length, groups.querySelectorAll('.scatterlayer .point').length,
                    sizes.querySelectorAll('.scatterlayer .trace .js-line').length,
                    groups.data[0].text[0]];
        """)
        traces, points, lines, hover = counts
        assert traces >= 4 and points >= 4 and lines >= 2  # 2 ops: points + median line each
        assert "ranks" in hover and "hosts node" in hover
    matrix = page.execute_script("""
        var m = document.getElementById('pf-matrix');
        return [m.querySelectorAll('.heatmaplayer image').length, m.data[0].y, m.data[0].x];
    """)
    assert matrix[0] == 1 and matrix[1] == ["node01", "node02", "node03", "node04"] and "NCCL001" in matrix[2]


def test_filtering_by_host(page: Any) -> None:
    from selenium.webdriver.support.ui import Select

    rows = page.find_elements("css selector", "#findings-table tr.finding")
    assert len(rows) >= 2
    Select(page.find_element("id", "filter-host")).select_by_value("node04")
    visible = [row for row in rows if row.is_displayed()]
    assert visible and len(visible) < len(rows)
    assert any("NCCL001" in row.text for row in visible)
    assert all("node04" in row.get_attribute("data-hosts") for row in visible)
    assert "of " + str(len(rows)) in page.find_element("id", "filter-count").text
    Select(page.find_element("id", "filter-host")).select_by_value("")
    assert all(row.is_displayed() for row in rows)
    page.find_element("id", "filter-search").send_keys("probes not started")
    assert [row for row in rows if row.is_displayed()] and all(
        "probes not started" in row.text for row in rows if row.is_displayed())
    page.find_element("id", "filter-search").clear()


def test_planted_markup_is_text_and_never_runs(page: Any) -> None:
    assert page.execute_script("return window.__pwned === undefined")
    drift = page.find_element("id", "drift").text
    assert IMG_PAYLOAD in drift and SCRIPT_PAYLOAD in drift and "NCCL_DEBUG" in drift
    assert page.execute_script("return document.querySelectorAll('img, #drift script').length") == 0


def test_bad_hosts_exclude_string(page: Any) -> None:
    assert "node04" in page.find_element("id", "exclude-string").text
    assert page.find_element("id", "exclude-string").text.startswith("--exclude=")


def test_the_runs_own_html_opens_without_errors(page: Any, planted_run: PlantedRun) -> None:
    page.get(planted_run.html.as_uri())
    assert wait_ready(page) == "1"  # the matrix only: this run's probes never started
    assert console_errors(page) == []
    assert page.find_element("id", "no-probes").is_displayed()


def test_the_kept_and_dropped_section_of_a_host_choice(page: Any, tmp_path: Path) -> None:
    from preflight.model import Finding, Severity
    from preflight.reports import html
    from tests.helpers.facts import built_report, host_facts

    report = built_report(host_facts(["gpu01", "gpu02", "gpu03"]), [
        Finding("NCCL008", Severity.ERROR, "NCCL_SOCKET_IFNAME=<b>nosuch0</b> matches no interface", "", [],
                ["gpu02"])])
    report.host_choice = report.keep_hosts(2)  # as `preflight report --keep 2 --html` stores it
    path = tmp_path / "kept.html"
    html.write(report, str(path))
    page.get(path.as_uri())
    wait_ready(page)
    assert console_errors(page) == []
    section = page.find_element("id", "host-choice")
    assert section.is_displayed() and "Kept / dropped and why" in section.text
    assert page.find_element("id", "kept-string").text == "--nodelist=gpu[01,03]"
    rows = [row.text for row in section.find_elements("css selector", "tbody tr")]
    assert rows[:2] == ["gpu01 kept", "gpu03 kept"] and rows[2].startswith("gpu02 dropped NCCL008")
    assert "<b>nosuch0</b>" in rows[2]  # user-derived text stays text
    button = page.find_element("id", "copy-kept")
    button.click()  # each copy button has its handler (headless: copied, or says to select)
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(page, 10).until(lambda _: button.text != "copy")  # the clipboard answers asynchronously
    assert button.text in ("copied", "select and copy")
