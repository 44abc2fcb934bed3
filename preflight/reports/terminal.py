"""The report on a terminal, with rich: the plain text view's sections (text.py), coloured.

Verdict banner (with the world, mesh and bad-hosts lines), findings with hints, the probe
table, the environment drift table, the check summary: the same content as the plain text a
log gets (tests/reports/test_terminal.py compares them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from preflight.model import JobReport, Severity
from preflight.reports import device_table, fabric_table, host_choice, nccl_table, probes_table, storage_table, text
from preflight.reports.common import SEVERITY_LABEL, check_summary, ordered_findings, where
from preflight.reports.common import wants_rich as wants_rich  # asked for here too (reports/__init__.py)
from preflight.reports.fit_table import fitted_tables

_VERDICT_STYLE = {0: "bold white on green", 1: "bold black on yellow", 3: "bold white on red"}
_SEVERITY_STYLE = {
    Severity.ERROR: "bold red",
    Severity.COULD_NOT_RUN: "magenta",
    Severity.WARN: "yellow",
    Severity.INFO: "cyan",
    Severity.OK: "green",
    Severity.SKIPPED: "dim",
}


def render(report: JobReport, stream: TextIO, width: int | None = None) -> None:
    """Print the report to a terminal (`width`: its columns; None: as the terminal says)."""
    console = Console(file=stream, highlight=False, width=width)
    style = _VERDICT_STYLE.get(report.exit_code, "bold white on magenta")
    # Text() keeps user-derived strings (hostlists with brackets, env values) out of rich markup.
    banner = Text.assemble((f" {report.verdict.upper()} ", style), f" exit {report.exit_code}: {report.why}\n",
                           "\n".join(text.run_lines(report)))
    console.print(Panel(banner, title="preflight", expand=True))
    if report.host_choice:
        console.print(Text("\n".join(host_choice.lines(report.host_choice))))
    findings = ordered_findings(report)
    rows: list[list[str | Text]] = [
        [Text(SEVERITY_LABEL[f.severity], style=_SEVERITY_STYLE[f.severity]), f.check_id, f.message, where(f), f.hint]
        for f in findings]
    _print_table(console, "", ["severity", "check", "finding", "where", "what to do"], rows, whole=["check"])
    _print_table(console, probes_table.TITLE, probes_table.HEADERS, probes_table.probe_rows(report),
                 whole=probes_table.WHOLE, keys=probes_table.KEYS)
    drift, more = text.drift_rows(report)
    _print_table(console, text.DRIFT_TITLE, ["variable", "values"], drift,
                 f"... and {more} more variable(s); see the HTML or JSON report" if more else "", whole=["variable"])
    _print_table(console, device_table.TITLE, device_table.HEADERS, device_table.device_rows(report),
                 device_table.hidden_line(report), whole=device_table.WHOLE, keys=device_table.KEYS)
    _print_table(console, fabric_table.TITLE, fabric_table.HEADERS, fabric_table.shown_rows(report),
                 fabric_table.hidden_line(report))
    if nccl_table.rows(report):
        _print_table(console, nccl_table.TITLE, nccl_table.DIM_HEADERS, nccl_table.dim_rows(report))
        _print_table(console, "", nccl_table.HEADERS, nccl_table.rows(report), nccl_table.summary_line(report))
    _print_table(console, storage_table.TITLE, storage_table.HEADERS, storage_table.rows(report),
                 storage_table.summary_line(report))
    console.print(Text(check_summary(report)))


def _print_table(console: Console, title: str, headers: list[str], rows: Sequence[Sequence[str | Text]],
                 below: str = "", whole: Sequence[str] = (), keys: Sequence[str] = ()) -> None:
    """One table (nothing when there are no rows) fitted to the console, figures whole
    (fit_table.py), and the line under it if any."""
    if not rows:
        return
    for part in fitted_tables(title, headers, rows, console.width, whole=whole, keys=keys):
        console.print(part)
    if below:
        console.print(Text(below))
