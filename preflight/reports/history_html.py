"""`preflight history --html PATH`: the shown runs' trends as one self-contained page.

The runs table first (a failed run's row coloured, each check id once with its count), then
one chart per figure (e.g. `tp all_reduce 256 MiB`), one line per host or GPU, the x axis the
runs' start times to scale, a failed run a red dashed line: inline SVG drawn with
reports/charts.py's axes, as the run report's charts are, so the page needs no network and no
script. User-derived strings are escaped by the template
(autoescape) and by the chart code.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from preflight.lib.files import ensure_parent
from preflight.model.history_records import HistoryFilters, RunView
from preflight.reports.charts import OP_COLOURS, WIDTH, _axes, _esc, _gbps, _nice_max, _svg
from preflight.reports.history_trends import series
from preflight.reports.html import _environment

MAX_SERIES = 64  # lines per chart: beyond that, the hosts with the lowest latest figure


def _epoch(when: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(when).timestamp()
    except ValueError:
        return None


def _time_ticks(first: float, last: float, count: int = 4) -> list[tuple[float, str]]:
    """`count` moments from first to last, labelled by date (and time when the span is under 3 days)."""
    pattern = "%m-%d %H:%M" if last - first < 3 * 86400 else "%Y-%m-%d"
    moments = [first + (last - first) * i / (count - 1) for i in range(count)] if last > first else [first]
    return [(m, datetime.datetime.fromtimestamp(m, datetime.timezone.utc).strftime(pattern)) for m in moments]


def trend_svg(label: str, subjects: dict[str, list[tuple[str, float]]], unit: str = "busbw (GB/s)",
              failed: Sequence[str] = ()) -> str:
    """A figure over the runs (`preflight history --html`): one line per host or GPU, the x axis
    the runs' start times to scale (a week between two runs is wider than an hour), each point's
    time and value in its tooltip; a run that failed (`failed`: its start times) is a red dashed
    line across the chart and its points are ringed red. Tick labels stay inside the chart: the
    first starts at the axis, the last ends at it."""
    times = sorted({t for points in subjects.values() for t, _ in points} | set(failed))
    stamps = {t: _epoch(t) for t in times}
    if any(stamp is None for stamp in stamps.values()):  # not ISO 8601: in order, evenly spaced
        stamps = {t: float(i) for i, t in enumerate(times)}
    known = [stamp for stamp in stamps.values() if stamp is not None]
    first, last = (min(known), max(known)) if known else (0.0, 0.0)
    top = _nice_max(max((v for points in subjects.values() for _, v in points), default=1.0))
    left, right, upper, plot_h = 56, 24, 12, 190
    height = upper + plot_h + 40
    span = WIDTH - left - right

    def at(stamp: float) -> float:
        return left + (span * (stamp - first) / (last - first) if last > first else span / 2)

    def x(when: str) -> float:
        return at(stamps[when] or 0.0)

    def y(value: float) -> float:
        return upper + plot_h * (1 - value / top)

    parts = [_axes(left, upper, span, plot_h, top, _esc(unit))]
    ticks = _time_ticks(first, last) if known and all(_epoch(t) is not None for t in times) else []
    for index, (moment, text) in enumerate(ticks):
        anchor = "start" if index == 0 and len(ticks) > 1 else "end" if index == len(ticks) - 1 and index else "middle"
        parts.append(f'<text class="tick" x="{at(moment):.1f}" y="{upper + plot_h + 16}" text-anchor="{anchor}">'
                     f"{_esc(text)}</text>")
    parts.append(f'<text class="axis-title" x="{left + span / 2:.1f}" y="{height - 4}" text-anchor="middle">'
                 "run started (UTC), to scale</text>")
    failed_at = set(failed)
    for when in sorted(failed_at):
        parts.append(f'<line class="failed-run" x1="{x(when):.1f}" y1="{upper}" x2="{x(when):.1f}" '
                     f'y2="{upper + plot_h}" stroke="#d0312d" stroke-width="1.5" stroke-dasharray="4,3">'
                     f"<title>run started {_esc(when)} failed</title></line>")
    for index, (subject, points) in enumerate(sorted(subjects.items())):
        colour = OP_COLOURS[index % len(OP_COLOURS)]
        line = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
        parts.append(f'<polyline class="trend" data-subject="{_esc(subject, 80)}" points="{line}" fill="none" '
                     f'stroke="{colour}" stroke-width="1.5"/>')
        for t, v in points:
            ring = ' class="point failed" r="4" stroke="#d0312d" stroke-width="2"' if t in failed_at else \
                ' class="point" r="3"'
            parts.append(f'<circle{ring} cx="{x(t):.1f}" cy="{y(v):.1f}" fill="{colour}">'
                         f"<title>{_esc(subject, 80)} at {_esc(t)}: {_gbps(v)}"
                         f"{' (run failed)' if t in failed_at else ''}</title></circle>")
    return _svg(height, parts, label)


def failed_run(run: RunView) -> bool:
    """A run that failed or did not finish (exit 3 or 4): marked on the charts and in the table."""
    return run.exit_code >= 3


def counted_ids(findings: Sequence[dict[str, object]]) -> list[str]:
    """`BW003 (2)`, `BW004`: each check id once, with how many findings it had, in first-seen order."""
    counts = Counter(str(f["check_id"]) for f in findings)
    return [f"{check_id} ({count})" if count > 1 else check_id for check_id, count in counts.items()]


def trend_figures(runs: list[RunView]) -> list[dict[str, Any]]:
    """Per figure label: its title, the subjects drawn (host or GPU, each with its points) and the SVG."""
    by_label: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for subject, labels in series(runs).items():
        for label, points in labels.items():
            by_label.setdefault(label, {})[subject] = points
    failed = [run.started_at for run in runs if failed_run(run)]
    figures = []
    for index, (label, subjects) in enumerate(sorted(by_label.items())):
        shown = dict(sorted(subjects.items(), key=lambda item: item[1][-1][1])[:MAX_SERIES])
        legend = [(subject, OP_COLOURS[i % len(OP_COLOURS)]) for i, subject in enumerate(sorted(shown))]
        figures.append({"id": f"pf-trend-{index}", "title": label, "legend": legend,
                        "points": {subject: len(points) for subject, points in shown.items()},
                        "svg": trend_svg(label, shown, failed=failed)})
    return figures


def render(runs: list[RunView], filters: HistoryFilters, url: str) -> str:
    """The whole page: the runs table first (failed runs coloured), then a trend chart per figure."""
    rows = [{"run": run, "failed": failed_run(run), "findings": counted_ids(run.findings)} for run in runs]
    return _environment().get_template("history.html.j2").render(
        runs=runs, rows=rows, filters=filters, url=url, figures=trend_figures(runs),
        failed_count=sum(1 for row in rows if row["failed"]))


def write(runs: list[RunView], filters: HistoryFilters, url: str, path: Path) -> None:
    """Write the page to path, creating parent folders."""
    ensure_parent(path)
    path.write_text(render(runs, filters, url), encoding="utf-8")
