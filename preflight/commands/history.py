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
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from preflight.commands import drain
from preflight.lib.errors import BadInput
from preflight.lib.numbers import ascii_decimal, ascii_int
from preflight.model.history_records import HistoryFilters, RunView
from preflight.options import check_history_url, history_url, parse_flaky
from preflight.reports.history_trends import series, spark

ACTIONS = ("show", "exclude", "prune")
_DURATION = re.compile(r"([0-9]{1,6})\s{0,4}([smhdw])", re.ASCII)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_LAST = 100_000


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The `history` subcommand's flags."""
    parser = commands.add_parser("history", help="recorded runs per host/GPU, flaky hosts, pruning (--history URL)")
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
    parser.add_argument("--json", dest="json_path", nargs="?", const="-", metavar="PATH",
                        help="write {runs: [...], hosts: [...]} as JSON (stdout without PATH) (default: not written)")
    parser.add_argument("--html", dest="html_path", metavar="PATH", help="write trend charts as one HTML file"
                                                                    " (default: not written)")
    parser.add_argument("--flaky", nargs="?", const="3/10", default=None, metavar="K/N",
                        help="exclude: hosts that failed in K of their last N runs (default 3/10)")
    parser.add_argument("--exclude-file", metavar="PATH", help="exclude: also write the hosts here, one per line"
                                                          " (default: not written)")
    drain.add_flags(parser)  # exclude --flaky --drain [--yes]
    parser.add_argument("--older-than", default="", metavar="AGE", help="prune: delete runs older than e.g. 90d"
                                                                   " (default: none; prune needs it)")
    parser.add_argument("--timeout", dest="timeout_s", default="30",
                        help="seconds to wait for the history (default 30)")


def parse_age(text: str, flag: str) -> float:
    """`90d` -> seconds (s, m, h, d, w)."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise BadInput(f"{flag}: {text[:40]!r} is not an age (e.g. 90d, 12h, 2w)")
    return int(match.group(1)) * _SECONDS[match.group(2)]


def parse_since(text: str) -> float:
    """An age before now (7d) or an ISO date/time (UTC when no zone): seconds since the epoch."""
    if _DURATION.fullmatch(text.strip()):
        return time.time() - parse_age(text, "--since")
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadInput(f"--since: {text[:40]!r} is neither an age (7d) nor a date (2026-01-31)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def run_history(args: argparse.Namespace) -> int:
    """The `history` subcommand; BadInput (one line, exit 2) when the history cannot be used."""
    url = history_url(args.history)
    if not url:
        raise BadInput("no history: pass --history URL or set PREFLIGHT_HISTORY (docs/history.md)")
    check_history_url(url)
    args.timeout_s = ascii_decimal(args.timeout_s, "--timeout", maximum=3600.0)
    if args.timeout_s <= 0:
        raise BadInput("--timeout must be positive")
    from preflight.history.store import HistoryError, missing_file, shown_url

    try:
        if args.action == "prune":
            return _prune(url, args)
        if missing_file(url):
            raise BadInput(f"no history at {shown_url(url)} yet (a run with --history creates it)")
        if args.action == "exclude":
            return _exclude(url, args)
        return _show(url, args)
    except HistoryError as exc:
        raise BadInput(str(exc)) from None


def _prune(url: str, args: argparse.Namespace) -> int:
    if not args.older_than:
        raise BadInput("history prune needs --older-than AGE (e.g. 90d)")
    from preflight.history.queries import prune
    from preflight.history.store import missing_file, shown_url, transaction

    cutoff = time.time() - parse_age(args.older_than, "--older-than")
    if missing_file(url):
        raise BadInput(f"no history at {shown_url(url)}")
    with transaction(url, args.timeout_s, write=True) as conn:
        removed = prune(conn, cutoff)
    moment = datetime.datetime.fromtimestamp(cutoff, datetime.timezone.utc)
    print(f"pruned {removed} run(s) started before {moment:%Y-%m-%d %H:%M} UTC")
    return 0


def _exclude(url: str, args: argparse.Namespace) -> int:
    drain.check_flags(args)
    if args.flaky is None:
        raise BadInput("history exclude needs --flaky [K/N] (the hosts that failed in K of their last N runs)")
    from preflight.history import judge
    from preflight.history.store import transaction

    failures, window = parse_flaky(args.flaky)
    if failures > window:
        raise BadInput(f"--flaky {args.flaky}: K must not exceed N")
    with transaction(url, args.timeout_s, write=False) as conn:
        flaky = [] if conn.info.get("preflight_empty") else judge.all_flaky(conn, failures, window)
    hosts = [f.host for f in flaky]
    if args.exclude_file:
        _write_atomically(Path(args.exclude_file), "".join(f"{h}\n" for h in hosts))
    for f in flaky:
        print(f"{f.host}\t# failed {f.failed} of its last {f.runs} runs")
    if not flaky:
        print(f"# no host failed in {failures} of its last {window} runs", file=sys.stderr)
    return drain.carry_out(drain.from_flaky(flaky), args.yes) if args.drain else 0


def _write_atomically(path: Path, text: str) -> None:
    """Write beside the target and rename over it: a scheduler reading the file never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(temporary, path)


def _show(url: str, args: argparse.Namespace) -> int:
    from preflight.history.queries import runs_shown
    from preflight.history.store import shown_url, transaction

    last = ascii_int(args.last, "--last", minimum=1, maximum=MAX_LAST)
    filters = HistoryFilters(host=args.host, gpu=args.gpu, check=args.check,
                      since=parse_since(args.since) if args.since else None, last=last)
    with transaction(url, args.timeout_s, write=False) as conn:
        runs = [] if conn.info.get("preflight_empty") else runs_shown(conn, filters)
    summary = host_summary(runs)
    document = {"history": shown_url(url), "filters": asdict(filters), "runs": [asdict(r) for r in runs],
                "hosts": summary}
    if args.json_path:
        text = json.dumps(document, indent=1)
        if args.json_path == "-":
            print(text)
        else:
            _write_atomically(Path(args.json_path), text + "\n")
    if args.html_path:
        from preflight.reports.history_html import write

        write(runs, filters, shown_url(url), Path(args.html_path))
    if args.json_path != "-":
        print_tables(runs, filters, summary)
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


def print_tables(runs: list[RunView], filters: HistoryFilters, summary: list[dict[str, object]]) -> None:
    """The terminal view: the runs, then per host (or the one host/GPU) its figures' trends."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=False)
    if not runs:
        console.print("no runs match")
        return
    subject = filters.gpu or filters.host
    table = Table(title=f"runs{f' with {subject}' if subject else ''} (newest first)", title_justify="left")
    for column in ("started (UTC)", "run id", "verdict", "hosts", "failed hosts"):
        table.add_column(column)
    for run in runs:
        failed = [str(h["host"]) for h in run.hosts if h["failed"]]
        table.add_row(run.started_at, run.run_id, run.verdict, str(len(run.hosts)), ",".join(failed[:8]))
    console.print(table)
    trends = Table(title="trends per " + ("GPU" if filters.gpu else "host") + " (oldest → newest)",
                   title_justify="left")
    for column in ("subject", "figure", "runs", "latest", "median", "trend"):
        trends.add_column(column)
    for name, labels in sorted(series(runs).items()):
        for label, points in sorted(labels.items()):
            values = [v for _, v in points]
            trends.add_row(name, label, str(len(values)), f"{values[-1]:.3g}", f"{statistics.median(values):.3g}",
                           spark(values[-40:]))
    console.print(trends)
    failing = [s for s in summary if s["failed"]]
    if failing:
        hosts = Table(title="hosts that failed", title_justify="left")
        for column in ("host", "failed", "of runs", "last failed"):
            hosts.add_column(column)
        for s in failing:
            hosts.add_row(str(s["host"]), str(s["failed"]), str(s["runs"]), str(s["last_failed"]))
        console.print(hosts)
