"""`preflight report run.json --html out.html`: render a past run again from its JSON; with
`--keep N [--hostfile PATH]`, choose the best N of its hosts (spare nodes) and say why."""

from __future__ import annotations

import argparse

from preflight.commands import drain
from preflight.lib.errors import BadInput
from preflight.model import ExitCode
from preflight.model.codec import BadPayload
from preflight.options import ReportTargets
from preflight.reports import host_choice, write_reports
from preflight.reports import json as json_report
from preflight.steps.host_choice import rank_hosts


def rerender(args: argparse.Namespace) -> int:
    """Load the JobReport and write the requested formats; exit with the run's own code.

    With --keep N the report carries the choice (every format shows it), stdout is the choice
    alone (kept / dropped and why: the run printed its verdict already) and the exit code is
    the choice's: 0 when N hosts were kept, 3 when no choice could be made. An output that cannot
    be written is refused before anything is read (exit 2); one that fails while writing makes a
    0 exit 4 (reports/targets.py)."""
    if args.hostfile and args.keep is None:
        raise BadInput("--hostfile needs --keep N (how many hosts to keep)")
    targets = ReportTargets(json=args.json_path, html=args.html_path, junit=args.junit_path, text=args.text_path,
                            exclude=args.exclude_file, retry_exclude=args.retry_exclude_file,
                            hostfile=args.hostfile, quiet=args.keep is not None)
    unwritable = targets.unwritable()
    if unwritable:
        raise BadInput(f"cannot write {unwritable}")
    drain.check_flags(args)
    try:
        report = json_report.load(args.json_file)
    except FileNotFoundError:
        raise BadInput(f"{args.json_file}: no such file") from None
    except IsADirectoryError:
        raise BadInput(f"{args.json_file}: is a directory, not a JSON report") from None
    except BadPayload as exc:
        raise BadInput(f"{args.json_file}: not a preflight JSON report this preflight can read ({exc})") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"{args.json_file}: not a preflight JSON report ({type(exc).__name__}: {exc})") from None
    if args.keep is not None:
        if report.host_ranking is None:  # written before reports carried one: the same pure function
            report.host_ranking = rank_hosts(report)
        report.host_choice = report.keep_hosts(args.keep)
    written = write_reports(report, targets, announce=True)  # each file announced, even under --keep
    if args.drain:  # the exit code is the drain's (commands/drain.py)
        return drain.carry_out(drain.from_report(report, args.drain_warnings), args.yes,
                               drain.none_from_report(report, args.drain_warnings))
    if report.host_choice is None:
        return report.exit_code
    choice_to = targets.console()
    choice_to.write(host_choice.render(report))
    choice_to.flush()
    if not report.host_choice.chosen:
        return int(ExitCode.FAILED)
    return int(ExitCode.INCOMPLETE) if len(written) < len(targets.paths()) else int(ExitCode.PASSED)
