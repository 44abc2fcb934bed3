"""Plain text for logs and Slurm .out files: no colour, tabulate tables."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from preflight.model import JobReport
from preflight.reports import host_choice
from preflight.reports.common import (
    SEVERITY_LABEL,
    exclude_text,
    ordered_findings,
    rank_ranges,
    where,
    world_summary,
)
from preflight.reports.drift_table import UNSET, env_drift
from preflight.reports.probes_table import HEADERS, TITLE, probe_rows

MAX_DRIFT_ROWS = 20


def _probe_table(report: JobReport) -> list[str]:
    rows = probe_rows(report)
    if not rows:
        return []
    widths = [None] * len(HEADERS)
    widths[HEADERS.index("slowest group")] = 44
    return ["", TITLE, tabulate(rows, headers=HEADERS, tablefmt="simple", maxcolwidths=widths)]


def _drift_table(report: JobReport) -> list[str]:
    drift = env_drift(report, max_values=3)
    if not drift:
        return []
    rows = []
    for row in drift[:MAX_DRIFT_ROWS]:
        values = "; ".join(f"{v.value if v.value == UNSET else repr(v.value)} on ranks {v.ranks}" for v in row.values)
        more = f" (+{row.distinct - len(row.values)} more)" if row.distinct > len(row.values) else ""
        rows.append([row.variable, values + more])
    lines = ["", "environment drift (variables not the same on every rank)",
             tabulate(rows, headers=["variable", "values"], tablefmt="simple", maxcolwidths=[40, 100])]
    if len(drift) > MAX_DRIFT_ROWS:
        lines.append(f"  ... and {len(drift) - MAX_DRIFT_ROWS} more variable(s); see the HTML or JSON report")
    return lines


def render(report: JobReport) -> str:
    """The whole report as plain text."""
    lines = [
        f"preflight: {report.verdict.upper()} (exit {report.exit_code}): {report.why}",
        f"  {world_summary(report)}",
    ]
    if report.meta.mesh:
        lines.append(f"  mesh {report.meta.mesh}, backend {report.meta.backend}")
    if report.missing_ranks:
        lines.append(f"  missing ranks: {rank_ranges(report.missing_ranks, limit=50)}")
    exclude = exclude_text(report)
    if exclude:
        lines.append(f"  bad hosts: {exclude}")
    if report.host_choice:
        lines += [f"  {line}" for line in host_choice.lines(report.host_choice)]
    findings = ordered_findings(report)
    if findings:
        rows = [
            [SEVERITY_LABEL[f.severity], f.check_id, f.message, where(f), f.hint]
            for f in findings
        ]
        lines.append("")
        lines.append(
            tabulate(rows, headers=["severity", "check", "finding", "where", "what to do"],
                     tablefmt="simple", maxcolwidths=[None, None, 60, 30, 60])
        )
    lines += _probe_table(report)
    lines += _drift_table(report)
    lines.append("")
    lines.append(f"  {len(report.checks)} check(s) ran; {len(report.findings)} finding(s)")
    return "\n".join(lines) + "\n"


def write(report: JobReport, path: str) -> None:
    """Write the plain text report to path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(report))
