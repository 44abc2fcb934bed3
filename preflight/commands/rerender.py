"""`preflight report run.json --html out.html`: render a past run again from its JSON."""

from __future__ import annotations

import argparse

from preflight.lib.errors import BadInput
from preflight.options import ReportTargets
from preflight.reports import json as json_report
from preflight.reports import write_reports


def rerender(args: argparse.Namespace) -> int:
    """Load the JobReport and write the requested formats; exit with the run's own code."""
    try:
        report = json_report.load(args.json_file)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"{args.json_file}: not a preflight JSON report ({type(exc).__name__}: {exc})") from None
    targets = ReportTargets(json=args.json_path, html=args.html_path, junit=args.junit_path, text=args.text_path,
                            exclude=args.exclude_file, retry_exclude=args.retry_exclude_file)
    write_reports(report, targets)
    return report.exit_code
