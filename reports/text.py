"""Plain text for logs and Slurm .out files: no colour, tabulate tables."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from preflight.model import JobReport
from preflight.reports import probes_table
from preflight.reports.common import SEVERITY_LABEL, exclude_text, ordered_findings, where, world_summary


def render(report: JobReport) -> str:
    """The whole report as plain text."""
    lines = [
        f"preflight: {report.verdict.upper()} (exit {report.exit_code}): {report.why}",
        f"  {world_summary(report)}",
    ]
    if report.missing_ranks:
        lines.append(f"  missing ranks: {','.join(map(str, report.missing_ranks))}")
    exclude = exclude_text(report)
    if exclude:
        lines.append(f"  bad hosts: {exclude}")
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
    probe_rows = probes_table.probe_rows(report)
    if probe_rows:
        lines += ["", "collective probes (busbw, GB = 1e9 B):",
                  tabulate(probe_rows, headers=probes_table.HEADERS, tablefmt="simple")]
    lines.append(f"  {len(report.checks)} check(s) ran; {len(report.findings)} finding(s)")
    return "\n".join(lines) + "\n"


def write(report: JobReport, path: str) -> None:
    """Write the plain text report to path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(report))
