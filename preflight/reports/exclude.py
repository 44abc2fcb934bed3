"""`--exclude-file PATH`: the bad hosts, one per line, as Slurm's `--exclude=<file>` reads it."""

from __future__ import annotations

from pathlib import Path

from preflight.model import ExitCode, JobReport, Severity


def render(report: JobReport) -> str:
    """One host per line; empty when no host is bad (so a resubmit excludes nothing)."""
    return "".join(f"{host}\n" for host in report.bad_hosts)


def write(report: JobReport, path: str) -> None:
    """Write the file, always: an empty file says "no bad host", a missing one says nothing."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(report))


def retry_hosts(report: JobReport) -> list[str]:
    """The hosts a resubmission should exclude, when the failure is theirs alone; [] otherwise.

    Only a failed verdict (exit 3) with bad hosts qualifies, and only when every error finding
    is a host's fault: its check blames the hosts it names (`blames_host`: a missing rank, an
    unreachable host, a hung or slow probe), or it names some hosts but not all (a value only
    those hosts have, such as an interface variable set on one node). An error that names no
    host or every host is the job's configuration (the script's environment, a bad flag): a
    resubmission elsewhere would fail the same way, so none is suggested. An incomplete run
    (exit 4) proves nothing about a host.
    """
    if report.exit_code != int(ExitCode.FAILED) or not report.bad_hosts:
        return []
    everyone = {facts.host for facts in report.ranks}
    for finding in report.findings:
        if finding.severity != Severity.ERROR or finding.blames_host:
            continue
        named = set(finding.hosts)
        if not named or named >= everyone:
            return []
    return list(report.bad_hosts)


def write_retry(report: JobReport, path: str) -> None:
    """`--retry-exclude-file`: retry_hosts one per line; always written, empty when retrying cannot help."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(f"{host}\n" for host in retry_hosts(report)))
