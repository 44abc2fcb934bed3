"""`preflight history`: the recorded runs per host / GPU (terminal, --json, --html), flaky hosts
to exclude before scheduling, and pruning.

    preflight history [--host H | --gpu UUID] [--check ID] [--since 7d] [--last N] [--json [PATH]] [--html PATH]
    preflight history exclude --flaky [K/N] [--exclude-file PATH]
    preflight history prune --older-than 90d

The history is --history URL, else $PREFLIGHT_HISTORY. A history that cannot be read (missing,
corrupt, newer schema) is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

import msgspec

from preflight.commands import drain
from preflight.lib.errors import BadInput
from preflight.lib.files import atomic_write
from preflight.model.codec import encode
from preflight.model.history_records import HistoryFilters, RunView
from preflight.options_history import ACTIONS, DEFAULT_FLAKY, HistoryOptions
from preflight.reports.history_trends import series, spark
from preflight.reports.targets import STDOUT

FULL_WIDTH = 100_000  # piped or --wide: no table is ever narrower than its widest cell


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The `history` subcommand's flags."""
    parser = commands.add_parser("history", help="recorded runs per host/GPU, flaky hosts, pruning (--history URL)",
                                 description="Show the runs a --history recorded (per host or GPU, with trends), "
                                 "list flaky hosts to exclude, or prune old runs (`preflight explain history`).")
    parser.add_argument("action", nargs="?", choices=ACTIONS, default="show",
                        help="show (default): trend tables; exclude: write hosts to exclude; prune: delete old runs")
    parser.add_argument("--history", metavar="URL", default=None, help="the history, sqlite:///path or postgresql://..."
                                                                  " (default: $PREFLIGHT_HISTORY)")
    parser.add_argument("--host", default="", help="only runs with this host; its figures (default: every host)")
    parser.add_argument("--gpu", default="", metavar="UUID", help="only runs with this GPU; its figures"
                                                             " (default: every GPU)")
    parser.add_argument("--check", default="", metavar="ID", help="only runs with a finding of this check"
                                                             " (default: any run)")
    parser.add_argument("--since", default="", help="only runs started since: 7d, 12h, 2w, or a date (2026-01-31)"
                                               " (default: no limit)")
    parser.add_argument("--last", default="50", help="at most this many runs, newest first (default 50)")
    parser.add_argument("--json", dest="json_path", nargs="?", const=STDOUT, metavar="PATH",
                        help="write {runs: [...], hosts: [...]} as JSON (stdout without PATH) (default: not written)")
    parser.add_argument("--html", dest="html_path", metavar="PATH", help="write trend charts as one HTML file"
                                                                    " (default: not written)")
    parser.add_argument("--flaky", nargs="?", const=DEFAULT_FLAKY, default=None, metavar="K/N",
                        help="exclude: hosts that failed in K of their last N runs (default 3/10)")
    parser.add_argument("--exclude-file", metavar="PATH", help="exclude: also write the hosts here, one per line"
                                                          " (default: not written)")
    drain.add_flags(parser)  # exclude --flaky --drain [--yes]
    parser.add_argument("--older-than", default="", metavar="AGE", help="prune: delete runs older than e.g. 90d"
                                                                   " (default: none; prune needs it)")
    parser.add_argument("--wide", action="store_true",
                        help="tables at their full width on a terminal too: whole run ids and times, never wrapped "
                             "(default: fitted to the terminal; piped or redirected output is always whole)")
    parser.add_argument("--timeout", dest="timeout_s", default="30", metavar="SECONDS",
                        help="seconds to wait for the history (default 30)")


def run_history(args: argparse.Namespace) -> int:
    """The `history` subcommand; BadInput (one line, exit 2) when the history cannot be used."""
    options = HistoryOptions.parse(
        history=args.history, since=args.since, last=args.last, flaky=args.flaky, older_than=args.older_than,
        timeout=args.timeout_s, action=args.action, host=args.host, gpu=args.gpu, check=args.check,
        json_path=args.json_path, html_path=args.html_path, exclude_file=args.exclude_file, wide=args.wide,
        drain=args.drain, yes=args.yes, drain_warnings=getattr(args, "drain_warnings", False))
    _refuse_unwritable(options)
    from preflight.history.store import HistoryError, missing_file, shown_url

    try:
        if options.action == "prune":
            return _prune(options)
        if missing_file(options.url):
            raise BadInput(f"no history at {shown_url(options.url)} yet (a run with --history creates it)")
        if options.action == "exclude":
            return _exclude(options)
        return _show(options)
    except HistoryError as exc:
        raise BadInput(str(exc)) from None


def _refuse_unwritable(options: HistoryOptions) -> None:
    """--json PATH, --html PATH, --exclude-file PATH: one that cannot be written is one line and exit 2
    before the history is read (the rule of every output, preflight/reports/targets.py)."""
    from preflight.reports.targets import unwritable_path

    json_path = options.json_path if options.json_path != STDOUT else None
    for flag, path in (("--json", json_path), ("--html", options.html_path), ("--exclude-file", options.exclude_file)):
        why = unwritable_path(Path(path)) if path else ""
        if why:
            raise BadInput(f"cannot write {flag} {path}: {why}")


def _prune(options: HistoryOptions) -> int:
    from preflight.history.queries import prune
    from preflight.history.store import missing_file, shown_url, transaction

    cutoff = time.time() - (options.older_than_s or 0.0)
    if missing_file(options.url):
        raise BadInput(f"no history at {shown_url(options.url)}")
    with transaction(options.url, options.timeout_s, write=True) as conn:
        removed = prune(conn, cutoff)
    moment = datetime.datetime.fromtimestamp(cutoff, datetime.timezone.utc)
    print(f"pruned {removed} run(s) started before {moment:%Y-%m-%d %H:%M} UTC")
    return 0


def _exclude(options: HistoryOptions) -> int:
    from preflight.history import judge
    from preflight.history.store import transaction

    failures, window = options.flaky or (0, 0)  # validated: exclude always has --flaky
    with transaction(options.url, options.timeout_s, write=False) as conn:
        flaky = [] if conn.info.get("preflight_empty") else judge.all_flaky(conn, failures, window)
    hosts = [f.host for f in flaky]
    if options.exclude_file:
        atomic_write(options.exclude_file, "".join(f"{h}\n" for h in hosts))
    for f in flaky:
        print(f"{f.host}\t# failed {f.failed} of its last {f.runs} runs")
    if not flaky:
        print(f"# no host failed in {failures} of its last {window} runs", file=sys.stderr)
    why = f"no host failed {failures} of its last {window} recorded runs" if not flaky else ""
    return drain.carry_out(drain.from_flaky(flaky), options.yes, why) if options.drain else 0


def _show(options: HistoryOptions) -> int:
    from preflight.history.queries import runs_shown
    from preflight.history.store import shown_url, transaction

    filters = options.filters()
    with transaction(options.url, options.timeout_s, write=False) as conn:
        runs = [] if conn.info.get("preflight_empty") else runs_shown(conn, filters)
    summary = host_summary(runs)
    document = {"history": shown_url(options.url), "filters": filters, "runs": runs, "hosts": summary}
    if options.json_path:
        text = msgspec.json.format(encode(document), indent=1) + b"\n"  # the model types through the one codec
        if options.json_path == STDOUT:
            sys.stdout.buffer.write(text)
            sys.stdout.flush()
        else:
            atomic_write(options.json_path, text)
    if options.html_path:
        from preflight.reports.history_html import write

        write(runs, filters, shown_url(options.url), Path(options.html_path))
    if options.json_path != STDOUT:
        print_tables(runs, filters, summary, wide=options.wide)
    return 0


def host_summary(runs: list[RunView]) -> list[dict[str, object]]:
    """Per host over the runs shown: runs, failures, last failure, and each figure's latest and median."""
    hosts: dict[str, dict[str, object]] = {}
    for run in runs:  # newest first
        for h in run.hosts:
            entry = hosts.setdefault(str(h["host"]), {"host": h["host"], "runs": 0, "failed": 0, "last_failed": ""})
            entry["runs"] = int(entry["runs"]) + 1  # type: ignore[call-overload]
            if h["failed"]:
                entry["failed"] = int(entry["failed"]) + 1  # type: ignore[call-overload]
                entry["last_failed"] = entry["last_failed"] or run.started_at
    for subject, labels in series(runs).items():
        if subject in hosts:
            hosts[subject]["figures"] = {label: {"latest": points[-1][1], "median": statistics.median(
                v for _, v in points), "trend": [v for _, v in points]} for label, points in labels.items()}
    return [hosts[h] for h in sorted(hosts)]


def print_tables(runs: list[RunView], filters: HistoryFilters, summary: list[dict[str, object]],
                 wide: bool = False, width: int | None = None) -> None:
    """The terminal view: the runs, then per host (or the one host/GPU) its figures' trends.

    Fitted to a terminal's width without splitting a figure (reports/fit_table.py); piped,
    redirected or `--wide`, every table is at its full width, so a run id can be copied whole
    from a log."""
    from rich.console import Console

    from preflight.reports.fit_table import fitted_tables

    full = wide or not sys.stdout.isatty()
    console = Console(highlight=False, soft_wrap=False, width=FULL_WIDTH if full and width is None else width)
    if not runs:
        console.print("no runs match")
        return

    def show(title: str, headers: list[str], rows: list[list[str]], whole: list[str], keys: list[str]) -> None:
        if not rows:
            return
        for part in fitted_tables(title, headers, rows, console.width, whole=whole, keys=keys):
            console.print(part)

    subject = filters.gpu or filters.host
    show(f"runs{f' with {subject}' if subject else ''} (newest first)",
         ["run id", "started (UTC)", "verdict", "hosts", "failed hosts"],
         [[run.run_id, run.started_at, run.verdict, str(len(run.hosts)),
           ", ".join([str(h["host"]) for h in run.hosts if h["failed"]][:8])] for run in runs],
         whole=["started (UTC)", "run id", "hosts"], keys=["run id"])
    rows = []
    for name, labels in sorted(series(runs).items()):
        for label, points in sorted(labels.items()):
            values = [v for _, v in points]
            rows.append([name, label, str(len(values)), f"{values[-1]:.3g}", f"{statistics.median(values):.3g}",
                         spark(values[-40:])])
    show("trends per " + ("GPU" if filters.gpu else "host") + " (oldest → newest)",
         ["subject", "figure", "runs", "latest", "median", "trend"], rows,
         whole=["subject", "runs", "latest", "median", "trend"], keys=["subject"])
    failing = [s for s in summary if s["failed"]]
    if failing:
        show("hosts that failed", ["host", "failed", "of runs", "last failed"],
             [[str(s["host"]), str(s["failed"]), str(s["runs"]), str(s["last_failed"])] for s in failing],
             whole=["host", "failed", "of runs", "last failed"], keys=["host"])
