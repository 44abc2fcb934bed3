"""`preflight report run.json --html out.html`: render a past run again from its JSON."""

from __future__ import annotations

import argparse
import sys

from preflight.lib.errors import BadInput
from preflight.options import ReportTargets
from preflight.reports import json as json_report
from preflight.reports import write_reports


def rerender(args: argparse.Namespace) -> int:
    """Load the JobReport and write the requested formats; exit with the run's own code."""
    try:
        report = json_report.load(args.json_file)
    except FileNotFoundError:
        raise BadInput(f"{args.json_file}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{args.json_file}: is a directory, not a JSON report") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"{args.json_file}: not a preflight JSON report ({type(exc).__name__}: {exc})") from None
    targets = ReportTargets(json=args.json_path, html=args.html_path, junit=args.junit_path, text=args.text_path,
                            exclude=args.exclude_file, retry_exclude=args.retry_exclude_file)
    for flag, path in write_reports(report, targets):
        print(f"preflight: wrote {flag.lstrip('-')} report {path}", file=sys.stderr)
    return report.exit_code
