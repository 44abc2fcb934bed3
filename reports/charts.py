"""Plotly figure specs (plain dicts) for the HTML report: per-dimension bandwidth, host x check matrix.

The figures are data for plotly.js, which the page embeds once; nothing is drawn by hand.
Hover texts carry user-derived strings (host names, messages), so they are HTML-escaped
here: plotly renders a small HTML subset in hover labels, and escaped text stays text.
"""

from __future__ import annotations

import html
import statistics
from collections import defaultdict
from typing import Any

from preflight.lib.hostlist import compress_hostlist
from preflight.lib.units import human_bytes
from preflight.model import Finding, JobReport, ProbeResult, Severity
from preflight.reports.common import SEVERITY_LABEL, rank_ranges
from preflight.reports.probe_dims import by_op, largest_size

SEVERITY_COLOUR = {
    Severity.SKIPPED: "#b8b8b8",  # grey: did not apply, neither passed nor failed
    Severity.OK: "#3a9d5d",
    Severity.INFO: "#4a90c2",
    Severity.WARN: "#e0b000",
    Severity.COULD_NOT_RUN: "#9b59b6",
    Severity.ERROR: "#d0312d",
}
_OP_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
MAX_MATRIX_HOSTS = 300


def _esc(text: str, limit: int = 300) -> str:
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return html.escape(text)


def busbw_by_size_figure(dim: str, results: list[ProbeResult]) -> dict[str, Any]:
    """busbw versus message size, one line per op (median over the dimension's groups)."""
    traces = []
    sizes_seen: set[int] = set()
    for index, (op, rows) in enumerate(by_op(results).items()):
        per_size: dict[int, list[ProbeResult]] = defaultdict(list)
        for row in rows:
            per_size[row.size_bytes].append(row)
        sizes = sorted(per_size)
        sizes_seen.update(sizes)
        medians, texts = [], []
        for size in sizes:
            values = [r.busbw_gbps for r in per_size[size]]
            medians.append(round(statistics.median(values), 4))
            texts.append(f"{_esc(op)} {human_bytes(size)}<br>median busbw {statistics.median(values):.2f} GB/s"
                         f"<br>min {min(values):.2f} / max {max(values):.2f} over {len(values)} group(s)")
        traces.append({
            "type": "scatter", "mode": "lines+markers", "name": _esc(op), "x": sizes, "y": medians,
            "text": texts, "hoverinfo": "text", "line": {"color": _OP_COLOURS[index % len(_OP_COLOURS)]},
        })
    ticks = sorted(sizes_seen)
    layout = {
        "title": {"text": f"{_esc(dim)}: busbw vs message size (median of groups)", "x": 0.01, "xanchor": "left"},
        "xaxis": {"type": "log", "title": {"text": "message size"}, "tickvals": ticks,
                  "ticktext": [human_bytes(s) for s in ticks]},
        "yaxis": {"title": {"text": "busbw (GB/s)"}, "rangemode": "tozero"},
        "height": 380, "margin": {"t": 40, "b": 50, "l": 60, "r": 20}, "legend": {"orientation": "h", "y": -0.22},
    }
    return {"data": traces, "layout": layout}


def groups_figure(dim: str, results: list[ProbeResult], expected: float | None) -> dict[str, Any]:
    """Each group at the op's largest size as a point, with the sibling median and expected rate."""
    traces: list[dict[str, Any]] = []
    groups_seen: list[int] = []
    for index, summary in enumerate(largest_size(dim, results)):
        colour = _OP_COLOURS[index % len(_OP_COLOURS)]
        op, largest, at_largest, median = summary.op, summary.size_bytes, summary.groups, summary.median_gbps
        texts = []
        for r in at_largest:
            ratio = f" ({r.busbw_gbps / median:.2f} x median)" if median > 0 else ""
            check = "" if r.verified else "<br><b>RESULT WRONG (verification failed)</b>"
            nominal = (f"<br>{r.busbw_gbps / r.nominal_gbps:.0%} of {r.nominal_gbps:g} GB/s "
                       f"({_esc(r.nominal_source)})" if r.nominal_gbps else "")
            texts.append(
                f"{_esc(op)} {human_bytes(largest)}, group {r.group_index}<br>busbw {r.busbw_gbps:.2f} GB/s{ratio}"
                f"{nominal}<br>ranks {_esc(rank_ranges(r.ranks))}<br>hosts {_esc(compress_hostlist(r.hosts), 200)}"
                f"{check}"
            )
        xs = [r.group_index for r in at_largest]
        groups_seen += xs
        traces.append({
            "type": "scatter", "mode": "markers", "name": f"{_esc(op)} @ {human_bytes(largest)}", "x": xs,
            "y": [round(r.busbw_gbps, 4) for r in at_largest], "text": texts, "hoverinfo": "text",
            "marker": {"color": colour, "size": 9,
                       "symbol": ["circle" if r.verified else "x" for r in at_largest]},
        })
        traces.append({
            "type": "scatter", "mode": "lines", "name": f"{_esc(op)} sibling median", "x": [min(xs), max(xs)],
            "y": [round(median, 4)] * 2, "hoverinfo": "name", "line": {"color": colour, "dash": "dash", "width": 1},
        })
    nominal = min((r.nominal_gbps for r in results if r.nominal_gbps), default=None)
    if nominal is not None and groups_seen:
        traces.append({
            "type": "scatter", "mode": "lines", "name": f"link nominal {nominal:g} GB/s",
            "x": [min(groups_seen), max(groups_seen)], "y": [nominal, nominal], "hoverinfo": "name",
            "line": {"color": "#999", "dash": "longdash", "width": 1},
        })
    if expected is not None and groups_seen:
        traces.append({
            "type": "scatter", "mode": "lines", "name": f"expected {expected:g} GB/s",
            "x": [min(groups_seen), max(groups_seen)], "y": [expected, expected], "hoverinfo": "name",
            "line": {"color": "#444", "dash": "dot", "width": 2},
        })
    layout = {
        "title": {"text": f"{_esc(dim)}: each group at the largest size", "x": 0.01, "xanchor": "left"},
        "xaxis": {"title": {"text": "group index"}, "tickformat": "d",
                  **({"dtick": 1} if len(set(groups_seen)) <= 16 else {})},
        "yaxis": {"title": {"text": "busbw (GB/s)"}, "rangemode": "tozero"},
        "height": 380, "margin": {"t": 40, "b": 50, "l": 60, "r": 20}, "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.22},
    }
    return {"data": traces, "layout": layout}


def finding_hosts(finding: Finding, rank_hosts: dict[int, str]) -> list[str]:
    """The hosts a finding concerns: its own, else those of its ranks."""
    if finding.hosts:
        return sorted(set(finding.hosts))
    return sorted({rank_hosts[r] for r in finding.ranks if r in rank_hosts})


def matrix_figure(report: JobReport, rank_hosts: dict[int, str]) -> dict[str, Any] | None:
    """Host x check, each cell the worst severity that check found on that host; None if empty."""
    hosts = sorted(set(rank_hosts.values()))
    checks = sorted({c.check_id for c in report.checks} | {f.check_id for f in report.findings})
    if not hosts or not checks:
        return None
    cells: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    for finding in report.findings:
        # A finding that names no rank and no host concerns the whole job: it colours the whole column.
        named = finding_hosts(finding, rank_hosts) if (finding.hosts or finding.ranks) else hosts
        for host in named:
            cells[(host, finding.check_id)].append(finding)
    worst_host = {h: max((f.severity.rank for c in checks for f in cells.get((h, c), [])), default=0) for h in hosts}
    if len(hosts) > MAX_MATRIX_HOSTS:  # the hosts with findings matter most; keep the figure readable
        hosts = sorted(hosts, key=lambda h: (-worst_host[h], h))[:MAX_MATRIX_HOSTS]
        hosts.sort()
    order = sorted(SEVERITY_COLOUR, key=lambda s: s.rank)
    skipped = {c.check_id: c.reason for c in report.checks if c.status == Severity.SKIPPED}
    z, texts = [], []
    for host in hosts:
        row, row_text = [], []
        for check_id in checks:
            found = cells.get((host, check_id), [])
            quiet = Severity.SKIPPED if check_id in skipped else Severity.OK
            worst = max((f.severity for f in found), key=lambda s: s.rank, default=quiet)
            row.append(order.index(worst))
            reason = f" ({_esc(skipped[check_id])})" if worst == Severity.SKIPPED else ""
            lines = [f"{_esc(host)} · {_esc(check_id)}: {SEVERITY_LABEL[worst]}{reason}"]
            lines += [_esc(f.message, 160) for f in found[:3]]
            if len(found) > 3:
                lines.append(f"... and {len(found) - 3} more")
            row_text.append("<br>".join(lines))
        z.append(row)
        texts.append(row_text)
    scale = []
    for index, severity in enumerate(order):  # stepped colour scale: one flat band per severity
        colour = SEVERITY_COLOUR[severity]
        scale += [[index / len(order), colour], [(index + 1) / len(order), colour]]
    data = [{
        "type": "heatmap", "x": [_esc(c) for c in checks], "y": [_esc(h) for h in hosts], "z": z,
        "text": texts, "hoverinfo": "text",
        "zmin": -0.5, "zmax": len(order) - 0.5, "colorscale": scale, "showscale": False, "xgap": 1, "ygap": 1,
    }]
    layout = {
        "height": min(1600, 120 + 22 * len(hosts)), "margin": {"t": 20, "b": 90, "l": 140, "r": 20},
        "xaxis": {"type": "category", "tickangle": -45, "side": "bottom"},
        "yaxis": {"type": "category", "autorange": "reversed"},
    }
    return {"data": data, "layout": layout}
