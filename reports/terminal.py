"""The report on a terminal, with rich: verdict banner, findings by severity with hints."""

from __future__ import annotations

import os
from typing import TextIO

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from preflight.model import JobReport, Severity
from preflight.reports import host_choice, probes_table
from preflight.reports.common import SEVERITY_LABEL, exclude_text, ordered_findings, where, world_summary

_VERDICT_STYLE = {0: "bold white on green", 1: "bold black on yellow", 3: "bold white on red"}
_SEVERITY_STYLE = {
    Severity.ERROR: "bold red",
    Severity.COULD_NOT_RUN: "magenta",
    Severity.WARN: "yellow",
    Severity.INFO: "cyan",
    Severity.OK: "green",
}


def wants_rich(stream: TextIO) -> bool:
    """Rich only on a real terminal without NO_COLOR; logs get plain text."""
    return stream.isatty() and "NO_COLOR" not in os.environ


def render(report: JobReport, stream: TextIO) -> None:
    """Print the report to a terminal."""
    console = Console(file=stream, highlight=False)
    style = _VERDICT_STYLE.get(report.exit_code, "bold white on magenta")
    # Text() keeps user-derived strings (hostlists with brackets, env values) out of rich markup.
    banner = Text.assemble((f" {report.verdict.upper()} ", style), f" exit {report.exit_code}: {report.why}\n",
                           world_summary(report))
    console.print(Panel(banner, title="preflight", expand=True))
    findings = ordered_findings(report)
    if findings:
        table = Table(show_lines=False, expand=True)
        for column in ("severity", "check", "finding", "where", "what to do"):
            table.add_column(column, overflow="fold")
        for finding in findings:
            table.add_row(
                Text(SEVERITY_LABEL[finding.severity], style=_SEVERITY_STYLE[finding.severity]),
                Text(finding.check_id), Text(finding.message), Text(where(finding)), Text(finding.hint),
            )
        console.print(table)
    probe_rows = probes_table.probe_rows(report)
    if probe_rows:
        probes = Table(title=probes_table.TITLE, expand=True)
        for column in probes_table.HEADERS:
            probes.add_column(column, overflow="fold")
        for row in probe_rows:
            probes.add_row(*(Text(cell) for cell in row))
        console.print(probes)
    exclude = exclude_text(report)
    if exclude:
        console.print(Text.assemble("bad hosts: ", (exclude, "bold")))
    if report.host_choice:
        console.print(Text("\n".join(host_choice.lines(report.host_choice))))
    console.print(f"{len(report.checks)} check(s) ran; {len(report.findings)} finding(s)")
