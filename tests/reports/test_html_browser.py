"""The HTML report in a real browser: Debian's chromium, headless, driven by selenium.

Opens the report of the real planted run (conftest.py), re-rendered with a probe table,
and checks what a person would see; keeps a screenshot in artifacts/ (git-ignored).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser import GEOMETRY_JS, chromium_driver, console_errors, full_page_screenshot, wait_ready
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
            return [groups.querySelectorAll('g.bar rect').length, sizes.querySelectorAll('polyline.median').length,
                    sizes.querySelectorAll('polygon.band').length,
                    Array.prototype.map.call(groups.querySelectorAll('g.bar text.label'), function (t) {{
                        return t.textContent; }}),
                    groups.querySelector('g.bar title').textContent];
        """)
        bars, lines, bands, labels, hover = counts
        assert bars >= 4 and lines == 2 and bands == 2  # 2 ops: a median line and a min..max band each
        assert all("ranks " in label and " on node" in label for label in labels), labels  # not "group 0, 1"
        assert "ranks" in hover and "hosts node" in hover
    matrix = page.execute_script("""
        var m = document.getElementById('pf-matrix');
        return [Array.prototype.map.call(m.querySelectorAll('tbody th.host'), function (t) { return t.textContent; }),
                Array.prototype.map.call(m.querySelectorAll('thead th.check'), function (t) { return t.textContent; }),
                m.querySelectorAll('td.cell.sev-error').length];
    """)
    assert matrix[0] == ["node01", "node02", "node03", "node04"] and "NCCL001" in matrix[1] and matrix[2] >= 1


GEOMETRY = GEOMETRY_JS + """
    var problems = [], doc = document.documentElement;
    if (doc.scrollWidth > doc.clientWidth + 1) { problems.push('page wider than the window: ' + doc.scrollWidth); }
    var table = document.getElementById('findings-table');
    if (box(table).r > doc.clientWidth + 1) { problems.push('findings table runs off: ' + box(table).r); }
    document.querySelectorAll('figure.chart-block').forEach(function (fig) {
        var cap = fig.querySelector('figcaption'), svg = fig.querySelector('svg');
        if (!svg) { return; }
        var s = box(svg);
        if (overlaps(box(cap), s)) { problems.push(fig.id + ': caption over the chart'); }
        if (s.r > box(fig).r + 1) { problems.push(fig.id + ': chart wider than its box'); }
        var texts = Array.prototype.slice.call(svg.querySelectorAll('text'));
        textsCutOff(svg).forEach(function (text) { problems.push(fig.id + ': text cut off: ' + text); });
        var labels = texts.filter(function (t) { return t.classList.contains('label'); });
        for (var i = 1; i < labels.length; i++) {
            if (overlaps(box(labels[i - 1]), box(labels[i]))) { problems.push(fig.id + ': labels overlap'); }
        }
    });
    document.querySelectorAll('.dim').forEach(function (dim) {
        var heading = box(dim.querySelector('h3'));
        dim.querySelectorAll('figure').forEach(function (fig) {
            if (overlaps(heading, box(fig))) { problems.push('heading over ' + fig.id); }
        });
    });
    var charts = document.querySelectorAll('figure.chart-block svg').length;
    var tools = document.querySelectorAll('.modebar, .modebar-container').length;
    return [problems, charts, tools];
"""


@pytest.mark.parametrize("width", [1400, 800])
def test_nothing_overlaps_or_runs_off_at_1400_and_800_px(page: Any, width: int) -> None:
    """Geometry in the real browser: no chart toolbar, captions and headings beside (not over) the
    charts, no label cut off or over another, no table running off the page."""
    page.set_window_size(width, 1000)
    try:
        problems, charts, tools = page.execute_script(GEOMETRY)
    finally:
        page.set_window_size(1400, 1000)
    assert charts == 4 and tools == 0
    assert problems == [], problems


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


def test_device_grids_show_the_slow_gpu(driver: Any, tmp_path: Path) -> None:
    from preflight.reports import html
    from tests.reports.test_device_table import _report

    page_file = tmp_path / "devices.html"
    page_file.write_text(html.render(_report()), encoding="utf-8")
    driver.get(page_file.as_uri())
    wait_ready(driver)
    assert console_errors(driver) == []
    grids = driver.find_elements("css selector", "#devices .device-grid")
    assert [g.get_attribute("data-figure") for g in grids] == ["gemm_bf16", "gemm_fp16", "gemm_tf32", "copy", "h2d",
                                                                "d2h"]
    bf16 = grids[0]
    assert "slowest: rank 11 on node1 GPU 3" in bf16.find_element("css selector", ".slowest").text
    red = [c for c in bf16.find_elements("css selector", "td.device-cell")
           if "244, 163, 163" in c.value_of_css_property("background-color")]
    assert [c.get_attribute("title") for c in red] == ["rank 11: 400 TFLOP/s"]


def test_the_kept_and_dropped_section_of_a_host_choice(driver: Any, tmp_path: Path) -> None:
    from preflight.model import Finding, Severity
    from preflight.reports import html
    from tests.helpers.facts import built_report, host_facts

    report = built_report(host_facts(["gpu01", "gpu02", "gpu03"]), [
        Finding("NCCL008", Severity.ERROR, "NCCL_SOCKET_IFNAME=<b>nosuch0</b> matches no interface", "", [],
                ["gpu02"])])
    report.host_choice = report.keep_hosts(2)  # as `preflight report --keep 2 --html` stores it
    path = tmp_path / "kept.html"
    html.write(report, str(path))
    driver.get(path.as_uri())
    wait_ready(driver)
    assert console_errors(driver) == []
    section = driver.find_element("id", "host-choice")
    assert section.is_displayed() and "Kept / dropped and why" in section.text
    assert driver.find_element("id", "kept-string").text == "--nodelist=gpu[01,03]"
    rows = [row.text for row in section.find_elements("css selector", "tbody tr")]
    assert rows[:2] == ["gpu01 kept", "gpu03 kept"] and rows[2].startswith("gpu02 dropped NCCL008")
    assert "<b>nosuch0</b>" in rows[2]  # user-derived text stays text
    button = driver.find_element("id", "copy-kept")
    button.click()  # each copy button has its handler (headless: copied, or says to select)
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 10).until(lambda _: button.text != "copy")  # the clipboard answers asynchronously
    assert button.text in ("copied", "select and copy")
