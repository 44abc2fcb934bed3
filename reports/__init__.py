"""Renderers of one JobReport. Each imports the model only."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from preflight.model import JobReport

if TYPE_CHECKING:
    from preflight.options import RunOptions


def write_reports(report: JobReport, options: RunOptions) -> None:
    """Write every requested format, then the verdict to stdout (rich on a TTY, else text)."""
    from preflight.reports import json as json_report
    from preflight.reports import terminal, text

    if options.json_path:
        json_report.write(report, options.json_path)
    if options.text_path:
        text.write(report, options.text_path)
    if options.quiet:
        return
    if terminal.wants_rich(sys.stdout):
        terminal.render(report, sys.stdout)
    else:
        sys.stdout.write(text.render(report))
        sys.stdout.flush()
