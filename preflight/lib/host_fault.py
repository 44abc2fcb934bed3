"""Whose fault a failed run is: the hosts' (some hosts can be left out) or the job's (fix it).

One rule, two users: `preflight report --retry-exclude-file` (what a resubmission excludes)
and the spare-node choice (preflight/steps/host_choice.py: which hosts are dropped first).
"""

from __future__ import annotations

from preflight.lib.grouping import ranks_per_host
from preflight.model import ExitCode, Finding, JobReport, Severity


def job_error(report: JobReport) -> Finding | None:
    """The first error that is the job's own, not a host's: its check does not blame the hosts it
    names (`blames_host`) and it names no host or every host (the script's environment, a bad
    flag). Leaving hosts out, or running elsewhere, would fail the same way. None when every
    error is a host's fault (or there is no error)."""
    for finding in report.findings:
        if finding.severity != Severity.ERROR or finding.blames_host:
            continue
        named = set(finding.hosts)
        if not named or named >= ranks_per_host(report.ranks).keys():  # (kept: the checks' texts counted them)
            return finding
    return None


def retry_hosts(report: JobReport) -> list[str]:
    """The hosts a resubmission should exclude, when the failure is theirs alone; [] otherwise.

    Only a failed verdict (exit 3) with bad hosts qualifies, and only when every error finding
    is a host's fault: its check blames the hosts it names (`blames_host`: a missing rank, an
    unreachable host, a hung or slow probe), or it names some hosts but not all (a value only
    those hosts have, such as an interface variable set on one node). An error that names no
    host or every host is the job's configuration (`job_error`): a resubmission elsewhere would
    fail the same way, so none is suggested. An incomplete run (exit 4) proves nothing about a host.
    """
    if report.exit_code != int(ExitCode.FAILED) or not report.bad_hosts or job_error(report):
        return []
    return list(report.bad_hosts)
