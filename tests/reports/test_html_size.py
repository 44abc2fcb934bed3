"""The issue's size bound: a 1024-rank report with three probed dimensions is under 2 MB (charts are
inline SVG; no chart library is embedded), and it opens in headless chromium with every figure
drawn and no console error. How fast it opens (the issue's 3 s) is a speed, measured by
benchmarks/html_report.py (docs/performance.md, "HTML report size and open time"), not asserted
here: on two shared cores a test's wall clock judges the machine (the median of three opens read
3.4 s once beside four xdist workers). The report is synthetic (tests/helpers/synthetic.py, a
documented fake).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.reports import html
from tests.helpers.browser import chromium_driver, console_errors, wait_ready
from tests.helpers.synthetic import big_report
from tests.helpers.tools import require_tool


@pytest.fixture(scope="module")
def big_page() -> str:
    report = big_report(world_size=1024, mesh="dp8,pp8,tp16")
    assert len(report.ranks) == 1024 and {p.dim for p in report.probes} == {"dp", "pp", "tp"}
    return html.render(report)


def test_1024_rank_report_is_under_2_mb(big_page: str) -> None:
    assert len(big_page.encode()) < 2_000_000


@pytest.mark.browser
def test_1024_rank_report_opens_with_every_figure_drawn_and_no_console_error(big_page: str, tmp_path: Path) -> None:
    chromium, chromedriver = require_tool("chromium"), require_tool("chromedriver")
    path = tmp_path / "big.html"
    path.write_text(big_page)
    with chromium_driver(chromium, chromedriver) as driver:
        driver.get(path.as_uri())
        assert wait_ready(driver, timeout_s=60) == "7"  # matrix + 2 charts x 3 dimensions
        assert float(driver.execute_script("return document.documentElement.getAttribute('data-ready-ms')")) > 0
        assert console_errors(driver) == []
