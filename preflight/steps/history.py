"""The run's two moments with its history (--history), both on rank 0 and both bounded:

`recall`, before the verdict: judge this run's figures against each subject's own past
(HIS002), name flaky hosts (HIS003), and give results without --expect or a profile their
history's median as the expectation (source `history`). `remember`, after the verdict:
write the run in one transaction, and the --metrics file. Neither changes the checks' findings
when it fails: each failure is one info finding (HIS001, HIS004) on the report, and an output
not written (reports/targets.py's rule: a pass exits 4, the headline names it).

The database side (judge, record, store: SQLAlchemy) is imported only when a run has
--history: every rank of every run imports this module, and SQLAlchemy's import is a
quarter of preflight's own (docs/performance.md, "preflight.check before the first step").
"""

from __future__ import annotations

from pathlib import Path

from preflight.checks.history_findings import below_own_history, flaky_host, history_unusable, metrics_not_written
from preflight.lib.deadline import call_with_deadline
from preflight.lib.files import ensure_parent
from preflight.lib.grouping import ranks_per_host
from preflight.model import Finding, JobReport, ProbeResult
from preflight.model.history_records import Drop, FigureRow, Flaky, OwnPast
from preflight.options import RunOptions
from preflight.reports.targets import Unwritten
from preflight.steps.verdict import RunRecord

GRACE_S = 2.0  # beyond the database's own timeouts, before the thread is given up on


def recall(record: RunRecord) -> list[Finding]:
    """HIS002 / HIS003 for this run from the history (HIS001 when it cannot be read); [] without --history."""
    options = record.options
    if not options.history.url:
        return []
    from preflight.history.record import figure_rows

    results = list(record.probes.results) if record.probes else []
    rows = figure_rows(results, record.probes.devices if record.probes else [], record.storage)
    hosts = sorted(ranks_per_host(record.all_facts))
    outcome = call_with_deadline(_judge, options.timeouts.history_s + GRACE_S, options, rows, hosts)
    if not outcome.ok:
        return _unusable(options.history.url, outcome.error, outcome.reason(options.timeouts.history_s), "read")
    drops, flaky, pasts = outcome.value
    _history_expectations(results, rows, pasts)
    found = [f for d in drops for f in below_own_history.report(d)]
    history = options.history
    return found + [f for h in flaky for f in flaky_host.report(h, history.flaky_failures, history.flaky_window)]


def _judge(options: RunOptions, rows: list[FigureRow],
           hosts: list[str]) -> tuple[list[Drop], list[Flaky], list[OwnPast]]:
    from preflight.history import judge
    from preflight.history.store import missing_file, transaction

    if missing_file(options.history.url):
        return [], [], []  # the first run of a new history
    with transaction(options.history.url, options.timeouts.history_s, write=False) as conn:
        if conn.info.get("preflight_empty"):
            return [], [], []
        drops, pasts = judge.drops(conn, rows)
        flaky = judge.flaky_hosts(conn, hosts, options.history.flaky_failures, options.history.flaky_window)
    return drops, flaky, pasts


def _history_expectations(results: list[ProbeResult], rows: list[FigureRow], pasts: list[OwnPast]) -> None:
    """A result with no --expect and no profile: the lowest median of its hosts' own pasts, when each has one."""
    from preflight.history import judge

    by_subject = {(p.subject, p.key): p for p in pasts if len(p.values) >= judge.MIN_RUNS}
    keys = {(r.dim, r.op, r.size_bytes, r.group_size, r.group_hosts): r.key for r in rows}
    for result in results:
        if result.expected_gbps is not None:
            continue
        key = keys.get((result.dim, result.op, result.size_bytes, len(result.ranks), len(set(result.hosts))))
        found = [by_subject.get((host, key)) for host in set(result.hosts)] if key else []
        if found and all(found):
            lowest = min((p for p in found if p), key=lambda p: p.median)
            result.expected_gbps = round(lowest.median, 4)
            result.expected_source = f"{judge.HISTORY_SOURCE} (median of {lowest.subject}'s last {len(lowest.values)})"


def remember(report: JobReport, options: RunOptions) -> tuple[list[str], list[Unwritten]]:
    """Write the run to --history and the figures to --metrics: the lines announcing what was written
    (reports/announce.py), and what was not, each also an info finding on the report (the caller
    marks the verdict: reports/targets.mark_unwritten)."""
    from preflight.reports.announce import history_line, written_line

    unwritten: list[Unwritten] = []
    written: list[str] = []
    if options.history.url:  # the database side only with --history (its import is not free: see above)
        from preflight.history.store import shown_url, sqlite_file
    recalled = not any(f.check_id == history_unusable.id for f in report.findings)
    if options.history.url and not recalled:  # unreadable before the verdict: HIS001 says so already
        unwritten.append(Unwritten("--history", shown_url(options.history.url), "not readable, so not recorded"))
    if options.history.url and recalled:
        outcome = call_with_deadline(_write, options.timeouts.history_s + GRACE_S, options.history.url,
                                     options.timeouts.history_s, report)
        if not outcome.ok:
            report.findings += _unusable(options.history.url, outcome.error,
                                         outcome.reason(options.timeouts.history_s), "written")
            unwritten.append(Unwritten("--history", shown_url(options.history.url),
                                       outcome.reason(options.timeouts.history_s)[:200]))
        else:
            written.append(history_line(shown_url(options.history.url), sqlite_file(options.history.url)))
    if options.history.metrics:
        from preflight.reports.metrics import write_metrics

        try:
            ensure_parent(Path(options.history.metrics))
            write_metrics(report, options.history.metrics)
            written.append(written_line("--metrics", options.history.metrics))
        except (OSError, ValueError) as exc:
            report.findings += metrics_not_written.report(path=options.history.metrics, reason=str(exc)[:200])
            unwritten.append(Unwritten("--metrics", options.history.metrics, str(exc)[:200]))
    return written, unwritten


def _write(url: str, timeout_s: float, report: JobReport) -> int:
    from preflight.history.record import write_run
    from preflight.history.store import transaction

    with transaction(url, timeout_s, write=True) as conn:
        return write_run(conn, report)


def _unusable(url: str, error: BaseException | None, reason: str, what: str) -> list[Finding]:
    from preflight.history.store import HistoryError, shown_url

    line = str(error) if isinstance(error, HistoryError) else f"history {shown_url(url)} not {what}: {reason}"
    prefix = "run not written to history" if what == "written" else "history not used (run not judged or recorded)"
    return history_unusable.report(reason=f"{prefix}: {line}", url=shown_url(url))
