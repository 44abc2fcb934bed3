"""`preflight history --html` in a real browser (Debian's chromium, headless, tests/helpers/browser.py)
at 800 and 1400 px: no label clipped or overlapping, nothing runs off the page, the runs table
first, failed runs marked on the charts and coloured in the table."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from preflight.commands.cli import main
from preflight.history.record import write_run
from preflight.history.store import transaction
from tests.helpers.browser import GEOMETRY_JS, chromium_driver, console_errors
from tests.helpers.synthetic import history_report
from tests.helpers.tools import require_tool

pytestmark = pytest.mark.browser
NOW = datetime.datetime.now(datetime.timezone.utc)
FAILED = (2, 7)  # of 10 runs: these failed (n3 their bad host)


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 runs over 5 hosts spread unevenly over 3 weeks, two failed, long run ids; the page."""
    folder = tmp_path_factory.mktemp("history-browser")
    url = f"sqlite:///{folder / 'h.db'}"
    hours = [0, 2, 3, 30, 31, 200, 300, 301, 480, 500]
    for i, hour in enumerate(hours):
        started = (NOW - datetime.timedelta(hours=520 - hour)).isoformat(timespec="seconds")
        report = history_report(f"preflight-launch-{i}-{'0123456789abcdef' * 3}", [f"n{h}" for h in range(1, 6)],
                                mesh="dp2,tp2", started_at=started, bad_hosts=["n3"] if i in FAILED else [])
        with transaction(url, 10.0, write=True) as conn:
            write_run(conn, report)
    page = folder / "history.html"
    assert main(["history", "--history", url, "--html", str(page)]) == 0
    return page


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    with chromium_driver(require_tool("chromium"), require_tool("chromedriver")) as browser:
        yield browser


GEOMETRY = GEOMETRY_JS + """
    var problems = [], doc = document.documentElement;
    if (doc.scrollWidth > doc.clientWidth + 1) { problems.push('page wider than the window: ' + doc.scrollWidth); }
    var figures = document.querySelectorAll('#trends figure');
    figures.forEach(function (fig) {
        var svg = fig.querySelector('svg'), s = box(svg);
        if (s.r > box(fig).r + 1) { problems.push(fig.id + ': chart wider than its box'); }
        if (overlaps(box(fig.querySelector('figcaption')), s)) { problems.push(fig.id + ': caption over the chart'); }
        textsCutOff(svg).forEach(function (text) { problems.push(fig.id + ': text cut off: ' + text); });
        var texts = Array.prototype.slice.call(svg.querySelectorAll('text'));
        var ticks = texts.filter(function (t) { return t.classList.contains('tick') && t.getAttribute('y') > 100; });
        for (var i = 1; i < ticks.length; i++) {
            if (overlaps(box(ticks[i - 1]), box(ticks[i]))) { problems.push(fig.id + ': time labels overlap'); }
        }
    });
    var runs = document.getElementById('runs'), trends = document.getElementById('trends');
    var failedRows = document.querySelectorAll('#runs-table tr.run-failed');
    var colour = failedRows.length ? getComputedStyle(failedRows[0].querySelector('td')).backgroundColor : '';
    return [problems, figures.length, box(runs).t < box(trends).t, failedRows.length, colour,
            document.querySelectorAll('#trends line.failed-run').length];
"""


@pytest.mark.parametrize("width", [1400, 800])
def test_history_page_geometry_and_failed_runs_at_1400_and_800_px(driver: Any, page_path: Path, width: int) -> None:
    driver.set_window_size(width, 1000)
    driver.get(page_path.as_uri())
    problems, figures, runs_first, failed_rows, colour, failed_lines = driver.execute_script(GEOMETRY)
    assert console_errors(driver) == []
    assert figures == 4 and runs_first
    assert problems == [], problems
    assert failed_rows == len(FAILED) and colour not in ("", "rgba(0, 0, 0, 0)"), colour
    assert failed_lines == figures * len(FAILED)
