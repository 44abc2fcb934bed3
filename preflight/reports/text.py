"""Plain text for logs and Slurm .out files: no colour, tabulate tables."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from preflight.lib.files import ensure_parent
from preflight.model import JobReport
from preflight.reports import device_table, fabric_table, host_choice, nccl_table, storage_table
from preflight.reports.common import (
    SEVERITY_LABEL,
    authentication_text,
    backend_text,
    check_summary,
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


def _device_table(report: JobReport) -> list[str]:
    rows = device_table.device_rows(report)
    if not rows:
        return []
    lines = ["", device_table.TITLE, tabulate(rows, headers=device_table.HEADERS, tablefmt="simple")]
    hidden = device_table.hidden_line(report)
    return [*lines, f"  {hidden}"] if hidden else lines


def _fabric_table(report: JobReport) -> list[str]:
    rows = fabric_table.shown_rows(report)
    if not rows:
        return []
    hidden = fabric_table.hidden_line(report)
    return ["", fabric_table.TITLE, tabulate(rows, headers=fabric_table.HEADERS, tablefmt="simple",
                                             maxcolwidths=[None, 40, 20, 50, 40]), *([f"  {hidden}"] if hidden else [])]


def _storage_table(report: JobReport) -> list[str]:
    rows = storage_table.rows(report)
    if not rows:
        return []
    return ["", storage_table.TITLE, tabulate(rows, headers=storage_table.HEADERS, tablefmt="simple",
                                              maxcolwidths=[None, 20, 60, None, None, None, None, None]),
            f"  {storage_table.summary_line(report)}"]


def _nccl_table(report: JobReport) -> list[str]:
    rows = nccl_table.rows(report)
    if not rows:
        return []
    return ["", nccl_table.TITLE, tabulate(nccl_table.dim_rows(report), headers=nccl_table.DIM_HEADERS,
                                           tablefmt="simple", maxcolwidths=[None, None, None, 80]),
            "", tabulate(rows, headers=nccl_table.HEADERS, tablefmt="simple",
                         maxcolwidths=[30, None, None, None, None, 30, 20, 20, 60]),
            f"  {nccl_table.summary_line(report)}"]


def _shown(value: str) -> str:
    """A value in quotes; `(unset)`, `(empty)` and `<redacted ...>` are labels, not values, and stay bare."""
    return value if value in (UNSET, "(empty)") or value.startswith("<redacted") else repr(value)


DRIFT_TITLE = "environment drift (variables not the same on every rank)"


def drift_rows(report: JobReport) -> tuple[list[list[str]], int]:
    """The drift table's rows ([variable, values]) as both terminal views show them, and how many
    variables were left out beyond MAX_DRIFT_ROWS."""
    drift = env_drift(report, max_values=3)
    rows = []
    for row in drift[:MAX_DRIFT_ROWS]:
        values = "; ".join(f"{_shown(v.value)} on {'rank' if v.count == 1 else 'ranks'} {v.ranks} ({v.hosts})"
                           for v in row.values)
        more = f" (+{row.distinct - len(row.values)} more)" if row.distinct > len(row.values) else ""
        rows.append([row.variable, values + more])
    return rows, max(0, len(drift) - MAX_DRIFT_ROWS)


def _drift_table(report: JobReport) -> list[str]:
    rows, more = drift_rows(report)
    if not rows:
        return []
    lines = ["", DRIFT_TITLE,
             tabulate(rows, headers=["variable", "values"], tablefmt="simple", maxcolwidths=[40, 100])]
    if more:
        lines.append(f"  ... and {more} more variable(s); see the HTML or JSON report")
    return lines


def run_lines(report: JobReport) -> list[str]:
    """The lines under the verdict, shared by both terminal views: world, mesh, authenticated,
    missing ranks, bad hosts."""
    lines = [world_summary(report)]
    if report.meta.mesh:
        lines.append(f"mesh {report.meta.mesh}, backend {backend_text(report)}")
    lines.append(f"authenticated: {authentication_text(report)}")
    if report.missing_ranks:
        lines.append(f"missing ranks: {rank_ranges(report.missing_ranks, limit=50)}")
    exclude = exclude_text(report)
    if exclude:
        lines.append(f"bad hosts: {exclude}")
    return lines


def render(report: JobReport) -> str:
    """The whole report as plain text."""
    lines = [f"preflight: {report.verdict.upper()} (exit {report.exit_code}): {report.why}"]
    lines += [f"  {line}" for line in run_lines(report)]
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
    lines += _device_table(report)
    lines += _fabric_table(report)
    lines += _nccl_table(report)
    lines += _storage_table(report)
    lines += _drift_table(report)
    lines.append("")
    lines.append(f"  {check_summary(report)}")
    return "\n".join(lines) + "\n"


def write(report: JobReport, path: str) -> None:
    """Write the plain text report to path."""
    target = Path(path)
    ensure_parent(target)
    target.write_text(render(report))
