"""`preflight history --html PATH`: the shown runs' trends as one self-contained page.

One plotly chart per figure (e.g. `tp all_reduce 256 MiB`), one line per host or GPU, the
x axis the runs' start times; plotly.js embedded as in the run report (reports/html.py), so
the page needs no network. User-derived strings are escaped by the template (autoescape)
and in the hover texts.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from preflight.model.history_records import HistoryFilters, RunView
from preflight.reports.history_trends import series
from preflight.reports.html import _csp_hash, _environment, _plotly_js

MAX_SERIES = 64  # lines per chart: beyond that, the hosts with the lowest latest figure


def trend_figures(runs: list[RunView]) -> list[dict[str, Any]]:
    """Plotly figure specs: per figure label, one line per subject over the runs (oldest first)."""
    by_label: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for subject, labels in series(runs).items():
        for label, points in labels.items():
            by_label.setdefault(label, {})[subject] = points
    figures = []
    for index, (label, subjects) in enumerate(sorted(by_label.items())):
        shown = sorted(subjects.items(), key=lambda item: item[1][-1][1])[:MAX_SERIES]
        traces = [{"type": "scatter", "mode": "lines+markers", "name": html.escape(subject[:80]),
                   "x": [t for t, _ in points], "y": [round(v, 4) for _, v in points]}
                  for subject, points in sorted(shown)]
        figures.append({"id": f"pf-trend-{index}", "title": label, "data": traces, "layout": {
            "title": {"text": html.escape(label), "x": 0.01, "xanchor": "left"},
            "xaxis": {"title": {"text": "run started (UTC)"}}, "yaxis": {"title": {"text": "busbw GB/s"}},
            "height": 360, "margin": {"l": 60, "r": 20, "t": 40, "b": 50}}})
    return figures


PAGE_JS = """(function () {
  var figures = JSON.parse(document.getElementById("pf-figures").textContent);
  var config = {displaylogo: false, responsive: true};
  Promise.all(figures.map(function (f) {
    return Plotly.newPlot(document.getElementById(f.id), f.data, f.layout, config);
  })).then(function () { document.documentElement.setAttribute("data-ready", String(figures.length)); },
           function () { document.documentElement.setAttribute("data-ready", "error"); });
})();"""


def render(runs: list[RunView], filters: HistoryFilters, url: str) -> str:
    """The whole page."""
    plotly_js = _plotly_js()
    return _environment().get_template("history.html.j2").render(
        runs=runs, filters=filters, url=url, figures=trend_figures(runs), plotly_js=plotly_js, page_js=PAGE_JS,
        csp_scripts=f"{_csp_hash(plotly_js)} {_csp_hash(PAGE_JS)}")


def write(runs: list[RunView], filters: HistoryFilters, url: str, path: Path) -> None:
    """Write the page to path, creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(runs, filters, url), encoding="utf-8")
