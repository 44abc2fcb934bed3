"""The HTML report's charts, drawn here as inline SVG: no chart library, no toolbar, no script.

Why not plotly: its full bundle (4.6 MB) made a 4-rank report 4.8 MB, its toolbar overlapped the
chart titles, and these charts need none of its interaction: a line per op, a band per size, a
bar per group, a grid of cells. Inline SVG is a few kB, draws before any script runs, scales
with the page (viewBox, width 100%) and shows details in native tooltips (`<title>`). Titles
and legends are HTML around the SVG (the template), so nothing can be drawn over them.

Every user-derived string (host names, messages, op names) is XML-escaped here, once; the
template inserts the finished SVG with `|safe`.
"""

from __future__ import annotations

import html
import math
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping

import markupsafe
from msgspec import Struct

from preflight.lib.hostlist import compress_hostlist, ranks_text
from preflight.lib.shorten import shorten
from preflight.lib.units import human_bytes, percent
from preflight.model import Finding, JobReport, ProbeResult, Severity
from preflight.reports.common import SEVERITY_LABEL
from preflight.reports.probe_dims import by_op, largest_size

SEVERITY_COLOUR = {
    Severity.SKIPPED: "#b8b8b8",  # grey: did not apply, neither passed nor failed
    Severity.OK: "#3a9d5d",
    Severity.INFO: "#4a90c2",
    Severity.WARN: "#e0b000",
    Severity.COULD_NOT_RUN: "#9b59b6",
    Severity.ERROR: "#d0312d",
}
OP_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
MAX_MATRIX_HOSTS = 300
MAX_GROUP_BARS = 48  # per op; beyond, the slowest are shown and the rest counted
WIDTH = 640  # the viewBox width; the SVG scales to its box
BAR_HEIGHT, LABEL_WIDTH = 18, 230


def _esc(text: str, limit: int = 300) -> str:
    text = shorten(text, limit)
    return html.escape(text, quote=True)


def _nice_max(value: float) -> float:
    """The axis maximum: 1, 2 or 5 times a power of ten, at or above value (a float, whatever value is).

    In floats: a loaded report's busbw of 1e308 made an integer power of ten whose double no float
    holds (OverflowError in the first tick); past the largest float the axis ends there.
    """
    if not value > 0:
        return 1.0
    if not math.isfinite(value) or value >= sys.float_info.max / 10:
        return sys.float_info.max
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in (1.0, 2.0, 5.0, 10.0) if step * power >= value)


def _gbps(value: float) -> str:
    return f"{value:.3g}"


def op_legend(ops: list[str]) -> list[tuple[str, str]]:
    """(op, colour) for the legend the template writes beside a dimension's charts."""
    return [(op, OP_COLOURS[i % len(OP_COLOURS)]) for i, op in enumerate(ops)]


def busbw_by_size_svg(dim: str, results: list[ProbeResult]) -> str:
    """busbw versus message size, per op: the median of the dimension's groups as a line, and the
    band from the slowest to the fastest group, so a straggler shows as the band's low edge."""
    ops = by_op(results)
    sizes = sorted({r.size_bytes for r in results})
    top = _nice_max(max((r.busbw_gbps for r in results), default=1.0))
    left, right, upper, plot_h = 56, 40, 12, 190
    height = upper + plot_h + 40
    span = WIDTH - left - right
    step = span / max(1, len(sizes) - 1)

    def x(size: int) -> float:
        return left + (sizes.index(size) * step if len(sizes) > 1 else span / 2)

    def y(value: float) -> float:
        return upper + plot_h * (1 - value / top)

    parts = [_axes(left, upper, span, plot_h, top, "busbw (GB/s)")]
    for size in sizes:
        parts.append(f'<text class="tick" x="{x(size):.1f}" y="{upper + plot_h + 16}" text-anchor="middle">'
                     f"{human_bytes(size)}</text>")
    parts.append(f'<text class="axis-title" x="{left + span / 2:.1f}" y="{height - 4}" text-anchor="middle">'
                 "message size</text>")
    for index, (op, rows) in enumerate(ops.items()):
        colour = OP_COLOURS[index % len(OP_COLOURS)]
        per_size: dict[int, list[float]] = defaultdict(list)
        for row in rows:
            per_size[row.size_bytes].append(row.busbw_gbps)
        points = sorted(per_size)
        lows = [(x(s), y(min(per_size[s]))) for s in points]
        highs = [(x(s), y(max(per_size[s]))) for s in points]
        medians = [(x(s), y(_median(per_size[s]))) for s in points]
        band = " ".join(f"{px:.1f},{py:.1f}" for px, py in highs + lows[::-1])
        parts.append(f'<polygon class="band" points="{band}" fill="{colour}" fill-opacity="0.15" '
                     f'stroke="{colour}" stroke-opacity="0.5" stroke-dasharray="3,2"/>')
        parts.append(f'<polyline class="median" points="{" ".join(f"{px:.1f},{py:.1f}" for px, py in medians)}" '
                     f'fill="none" stroke="{colour}" stroke-width="2"/>')
        for size, (px, py), (_, low) in zip(points, medians, lows):
            values = per_size[size]
            tip = (f"{_esc(op)} at {human_bytes(size)}: median {_gbps(_median(values))} GB/s, "
                   f"slowest {_gbps(min(values))}, fastest {_gbps(max(values))} over {len(values)} group(s)")
            parts.append(f'<circle class="point" cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{colour}">'
                         f"<title>{tip}</title></circle>")
            if len(values) > 1:
                parts.append(f'<circle class="low" cx="{px:.1f}" cy="{low:.1f}" r="3" fill="#fff" '
                             f'stroke="{colour}" stroke-width="1.5"><title>{tip}</title></circle>')
    return _svg(height, parts, f"{dim}: busbw by message size")


def groups_svg(dim: str, results: list[ProbeResult], expected: float | None) -> str:
    """Each group at the op's largest size as a bar labelled by its ranks and hosts, with the
    siblings' median (and the expected rate, where given) as vertical lines."""
    summaries = largest_size(dim, results)
    bars: list[tuple[str, ProbeResult, str, float]] = []  # (op, result, colour, median)
    hidden = 0
    for index, summary in enumerate(summaries):
        colour = OP_COLOURS[index % len(OP_COLOURS)]
        shown = sorted(summary.groups, key=lambda r: r.busbw_gbps)[:MAX_GROUP_BARS]
        hidden += len(summary.groups) - len(shown)
        bars += [(summary.op, r, colour, summary.median_gbps) for r in sorted(shown, key=lambda r: r.group_index)]
    values = [r.busbw_gbps for _, r, _, _ in bars] + ([expected] if expected else [])
    top = _nice_max(max(values, default=1.0))
    left, right, upper = LABEL_WIDTH, 16, 6
    span = WIDTH - left - right
    plot_h = BAR_HEIGHT * len(bars)
    height = upper + plot_h + 38

    def x(value: float) -> float:
        return left + span * value / top

    parts = []
    for tick in (0, top / 2, top):
        parts.append(f'<line class="grid" x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{upper}" '
                     f'y2="{upper + plot_h}"/><text class="tick" x="{x(tick):.1f}" y="{upper + plot_h + 14}" '
                     f'text-anchor="middle">{tick:g}</text>')
    parts.append(f'<text class="axis-title" x="{left + span / 2:.1f}" y="{height - 6}" text-anchor="middle">'
                 "busbw (GB/s) at the largest size</text>")
    multi_op = len(summaries) > 1
    for row, (op, r, colour, median) in enumerate(bars):
        top_y = upper + row * BAR_HEIGHT
        where = f"{ranks_text(r.ranks, limit=4)} on {compress_hostlist(r.hosts)}"
        label = (f"{op} " if multi_op else "") + where
        share = f", {percent(r.busbw_gbps / median)} of the siblings' median {_gbps(median)}" if median > 0 else ""
        wrong = "; RESULT WRONG (verification failed)" if not r.verified else ""
        tip = _esc(f"{op} {human_bytes(r.size_bytes)}, group {r.group_index}: {_gbps(r.busbw_gbps)} GB/s{share}; "
                   f"{ranks_text(r.ranks)}; hosts {compress_hostlist(r.hosts)}{wrong}", 400)
        slow = median > 0 and r.busbw_gbps < 0.5 * median
        parts.append(f'<g class="bar{" slow" if slow else ""}"><title>{tip}</title>'
                     f'<text class="label" x="{left - 6}" y="{top_y + BAR_HEIGHT * 0.7:.1f}" text-anchor="end">'
                     f"{_esc(label, 40)}</text>"
                     f'<rect x="{left}" y="{top_y + 2}" width="{max(1.0, x(r.busbw_gbps) - left):.1f}" '
                     f'height="{BAR_HEIGHT - 4}" fill="{colour}"{"" if r.verified else " fill-opacity=0.35"}/>'
                     f"</g>")
    for op, colour, median in {(op, colour, median) for op, _, colour, median in bars}:
        parts.append(f'<line class="median-line" x1="{x(median):.1f}" x2="{x(median):.1f}" y1="{upper}" '
                     f'y2="{upper + plot_h}" stroke="{colour}" stroke-dasharray="4,3">'
                     f"<title>{_esc(op)}: siblings' median {_gbps(median)} GB/s</title></line>")
    if expected:
        parts.append(f'<line class="expected-line" x1="{x(expected):.1f}" x2="{x(expected):.1f}" y1="{upper}" '
                     f'y2="{upper + plot_h}" stroke="#444" stroke-width="2" stroke-dasharray="1,3">'
                     f"<title>expected {expected:g} GB/s</title></line>")
    note = f'<p class="small">{hidden} faster group(s) not drawn.</p>' if hidden else ""
    return _svg(height, parts, f"{dim}: each group at the largest size") + note


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _axes(left: float, upper: float, span: float, plot_h: float, top: float, title: str) -> str:
    lines = []
    for tick in (0, top / 2, top):
        ty = upper + plot_h * (1 - tick / top)
        lines.append(f'<line class="grid" x1="{left}" x2="{left + span}" y1="{ty:.1f}" y2="{ty:.1f}"/>'
                     f'<text class="tick" x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end">{tick:g}</text>')
    lines.append(f'<text class="axis-title" transform="translate(12,{upper + plot_h / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle">{title}</text>')
    return "".join(lines)


def _svg(height: float, parts: list[str], label: str) -> str:
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {height:.0f}" role="img" aria-label="{_esc(label)}" '
            f'xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')


def finding_hosts(finding: Finding, rank_hosts: dict[int, str]) -> list[str]:
    """The hosts a finding concerns: its own, else those of its ranks."""
    if finding.hosts:
        return sorted(set(finding.hosts))
    return sorted({rank_hosts[r] for r in finding.ranks if r in rank_hosts})


class Matrix(Struct):
    """Host x check: each cell the worst severity that check found on that host, with a tooltip."""

    hosts: list[str]
    checks: list[str]
    cells: MatrixCells
    hidden_hosts: int = 0

    def rows(self) -> Iterator[tuple[str, markupsafe.Markup]]:
        """Each shown host with its row's cells as HTML (`<td>` each, its severity's class, its tooltip)."""
        for host in self.hosts:
            yield host, self.cells.row_html(host)


class MatrixCells(Mapping[tuple[str, str], tuple[Severity, str]]):
    """(host, check) -> (worst severity, tooltip), for every shown host and check.

    Most cells hold no finding (a 131,072-rank job: 300 hosts x ~140 checks, 43,200 cells): those are made
    from their check's quiet severity when asked for, and their HTML from one piece per check, not each
    cell through the template (0.15 s of the page's 0.25 s)."""

    def __init__(self, hosts: list[str], checks: list[str], found: dict[tuple[str, str], tuple[Severity, str]],
                 quiet: dict[str, tuple[Severity, str]]) -> None:
        self.hosts, self.checks = hosts, checks
        self.shown_hosts, self.shown_checks = frozenset(hosts), frozenset(checks)
        self.found = found  # the cells with findings
        self.quiet = quiet  # each check's severity and tooltip's end where nothing was found
        # A quiet cell's HTML but for its host: the template's escaping (markupsafe's), done once per check.
        self.quiet_html = {check_id: (f'<td class="cell sev-{markupsafe.escape(severity.value)}" title="',
                                      f' · {markupsafe.escape(check_id)}: {markupsafe.escape(tail)}"></td>')
                           for check_id, (severity, tail) in quiet.items()}

    def __getitem__(self, key: tuple[str, str]) -> tuple[Severity, str]:
        found = self.found.get(key)
        if found is not None:
            return found
        host, check_id = key
        if host not in self.shown_hosts or check_id not in self.shown_checks:
            raise KeyError(key)
        severity, tail = self.quiet[check_id]
        return severity, f"{host} · {check_id}: {tail}"

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return ((host, check_id) for host in self.hosts for check_id in self.checks)

    def __len__(self) -> int:
        return len(self.hosts) * len(self.checks)

    def row_html(self, host: str) -> markupsafe.Markup:
        """The `<td>` of each check on this host's row, escaped as the template escapes (markupsafe)."""
        quiet_html = self.quiet_html
        shown_host = str(markupsafe.escape(host))
        cells = []
        for check_id in self.checks:
            found = self.found.get((host, check_id))
            if found is None:
                start, end = quiet_html[check_id]
                cells.append(f"{start}{shown_host}{end}")
            else:
                cells.append(f'<td class="cell sev-{markupsafe.escape(found[0].value)}" '
                             f'title="{markupsafe.escape(found[1])}"></td>')
        return markupsafe.Markup("".join(cells))


def matrix(report: JobReport, rank_hosts: dict[int, str]) -> Matrix | None:
    """The host x check grid; a check that did not apply is grey (skipped); None if empty."""
    hosts = sorted(set(rank_hosts.values()))
    checks = sorted({c.check_id for c in report.checks} | {f.check_id for f in report.findings})
    if not hosts or not checks:
        return None
    found: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    for finding in report.findings:
        # A finding that names no rank and no host concerns the whole job: it colours the whole column.
        named = finding_hosts(finding, rank_hosts) if (finding.hosts or finding.ranks) else hosts
        for host in named:
            found[(host, finding.check_id)].append(finding)
    worst_host = dict.fromkeys(hosts, 0)  # from what was found, not every host x check (131,072 ranks: ~1M pairs)
    for (host, _), here in found.items():
        worst_host[host] = max(worst_host.get(host, 0), *(f.severity.rank for f in here))
    total = len(hosts)
    if total > MAX_MATRIX_HOSTS:  # the hosts with findings matter most; keep the grid readable
        hosts = sorted(sorted(hosts, key=lambda h: (-worst_host[h], h))[:MAX_MATRIX_HOSTS])
    skipped = {c.check_id: c.reason for c in report.checks if c.status == Severity.SKIPPED}
    skip_label, ok = SEVERITY_LABEL[Severity.SKIPPED], (Severity.OK, SEVERITY_LABEL[Severity.OK])
    quiet = {check_id: (Severity.SKIPPED, f"{skip_label} ({skipped[check_id] or 'did not apply'})")
             if check_id in skipped else ok for check_id in checks}
    shown = set(hosts)
    cells = {}
    for (host, check_id), here in found.items():
        if host not in shown:
            continue
        worst = max((f.severity for f in here), key=lambda s: s.rank)
        reason = f" ({skipped[check_id] or 'did not apply'})" if worst == Severity.SKIPPED else ""
        lines = [f"{host} · {check_id}: {SEVERITY_LABEL[worst]}{reason}"]
        lines += [f.message[:160] for f in here[:3]]
        if len(here) > 3:
            lines.append(f"... and {len(here) - 3} more")
        cells[(host, check_id)] = (worst, "\n".join(lines))
    return Matrix(hosts, checks, MatrixCells(hosts, checks, cells, quiet), hidden_hosts=total - len(hosts))
