"""Renderers of one JobReport. Each imports the model and pure helpers (preflight.lib) only."""

from __future__ import annotations

import sys
from collections.abc import Callable

from preflight.model import JobReport
from preflight.reports.targets import ReportTargets


def write_reports(report: JobReport, targets: ReportTargets) -> None:
    """Write every requested format, then the verdict to stdout (rich on a TTY, else text).

    One format failing to render must not cost the others (a report is always written):
    the failure is one line on stderr and the remaining formats are still written.
    """
    from preflight.reports import exclude, html, junit, terminal, text
    from preflight.reports import json as json_report

    writers: list[tuple[str, str | None, Callable[[JobReport, str], None]]] = [
        ("--json", targets.json, json_report.write),
        ("--text", targets.text, text.write),
        ("--exclude-file", targets.exclude, exclude.write),
        ("--junit", targets.junit, junit.write),
        ("--html", targets.html, html.write),
    ]
    for flag, path, write in writers:
        if not path:
            continue
        try:
            write(report, path)
        except Exception as exc:  # one renderer's bug or a full disk must not lose the rest
            print(f"preflight: could not write {flag} {path}: {type(exc).__name__}: {exc}", file=sys.stderr)
    if targets.quiet:
        return
    if terminal.wants_rich(sys.stdout):
        terminal.render(report, sys.stdout)
    else:
        sys.stdout.write(text.render(report))
        sys.stdout.flush()
