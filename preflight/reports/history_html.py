"""`preflight history --html PATH`: the shown runs' trends as one self-contained page.

One chart per figure (e.g. `tp all_reduce 256 MiB`), one line per host or GPU, the x axis the
runs' start times: inline SVG drawn by reports/charts.py, as the run report's charts are, so
the page needs no network and no script. User-derived strings are escaped by the template
(autoescape) and by the chart code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from preflight.model.history_records import HistoryFilters, RunView
from preflight.reports.charts import OP_COLOURS, trend_svg
from preflight.reports.history_trends import series
from preflight.reports.html import _environment
from preflight.reports.targets import ensure_parent

MAX_SERIES = 64  # lines per chart: beyond that, the hosts with the lowest latest figure


def trend_figures(runs: list[RunView]) -> list[dict[str, Any]]:
    """Per figure label: its title, the subjects drawn (host or GPU, each with its points) and the SVG."""
    by_label: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for subject, labels in series(runs).items():
        for label, points in labels.items():
            by_label.setdefault(label, {})[subject] = points
    figures = []
    for index, (label, subjects) in enumerate(sorted(by_label.items())):
        shown = dict(sorted(subjects.items(), key=lambda item: item[1][-1][1])[:MAX_SERIES])
        legend = [(subject, OP_COLOURS[i % len(OP_COLOURS)]) for i, subject in enumerate(sorted(shown))]
        figures.append({"id": f"pf-trend-{index}", "title": label, "legend": legend,
                        "points": {subject: len(points) for subject, points in shown.items()},
                        "svg": trend_svg(label, shown)})
    return figures


def render(runs: list[RunView], filters: HistoryFilters, url: str) -> str:
    """The whole page."""
    return _environment().get_template("history.html.j2").render(
        runs=runs, filters=filters, url=url, figures=trend_figures(runs))


def write(runs: list[RunView], filters: HistoryFilters, url: str, path: Path) -> None:
    """Write the page to path, creating parent folders."""
    ensure_parent(path)
    path.write_text(render(runs, filters, url), encoding="utf-8")
