"""Small formatting shared by the renderers: rank ranges, host lists, ordering."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TextIO

from preflight.lib.grouping import LastAnswerKept, ranks_per_host
from preflight.lib.hostlist import compress_hostlist, host_ranges, rank_ranges
from preflight.model import Finding, JobReport, RankFacts, Severity, culprit_order

SEVERITY_LABEL = {
    Severity.ERROR: "ERROR",
    Severity.COULD_NOT_RUN: "COULD NOT RUN",
    Severity.WARN: "WARN",
    Severity.INFO: "INFO",
    Severity.OK: "OK",
    Severity.SKIPPED: "SKIPPED",
}


def where(finding: Finding) -> str:
    """'ranks 3 on node07' style location of a finding; empty when it names nothing.

    Bounded, so a finding over thousands of ranks stays a few lines (the JSON has them all)."""
    pieces = []
    if finding.ranks:
        label = "rank" if len(finding.ranks) == 1 else "ranks"
        pieces.append(f"{label} {rank_ranges(finding.ranks, limit=4)}")
    if finding.hosts:
        pieces.append(f"on {host_ranges(finding.hosts)}")
    return " ".join(pieces)


def culprits_first(findings: list[Finding]) -> list[Finding]:
    """Findings in the one order every view shows (model.culprit_order): worst first, the culprit's own first."""
    return sorted(findings, key=culprit_order)


def ordered_findings(report: JobReport) -> list[Finding]:
    """The report's findings culprit first (culprits_first); OK findings are left out."""
    return culprits_first([f for f in report.findings if f.severity != Severity.OK])


def world_summary(report: JobReport) -> str:
    """One line: launcher, job, world, hosts, master, duration."""
    meta = report.meta
    count, hosts = _hosts(report.ranks)
    job = f" job {meta.job_id}" if meta.job_id else ""
    restart = f", restart #{meta.restart_count}" if meta.restart_count else ""
    # A Kubeflow init container: one preflight per pod, not the training's ranks (--mesh is refused).
    scope = " (node level: one preflight per pod, not the training's ranks)" if meta.launcher == "kubeflow" else ""
    if meta.launcher == "single":  # no launcher: no master, no job to speak of
        return f"no launcher: one process on {hosts}, {meta.duration_s:.1f}s"
    return (
        f"{meta.launcher}{scope}{job}: {meta.world_size} rank(s) on {count} host(s) "
        f"[{hosts}], master {meta.master_addr}:{meta.master_port}, "
        f"{meta.duration_s:.1f}s{restart}"
    )


def hostlist_text(ranks: Sequence[RankFacts]) -> str:
    """The hosts the ranks ran on, as a compressed hostlist (`gpu[001-016]`; kept, see `_hosts`)."""
    return _hosts(ranks)[1]


@LastAnswerKept
def _hosts(ranks: Sequence[RankFacts]) -> tuple[int, str]:
    """How many hosts the ranks ran on, and their compressed hostlist (kept: the text, terminal and
    HTML views each show it; at 131,072 ranks each pass over them is ~40 ms)."""
    hosts = ranks_per_host(ranks)  # (kept too: the checks' texts and the verdict counted them)
    return len(hosts), compress_hostlist(hosts)


def backend_text(report: JobReport) -> str:
    """The backend the probes used, or why there is none (an interrupted run chose none: never `auto`)."""
    return report.meta.backend or "none chosen (the probes did not run)"


def authentication_text(report: JobReport) -> str:
    """Whether the run's store values were authenticated, for the text and HTML reports."""
    if report.meta.authenticated:
        return "yes (PREFLIGHT_SECRET: every payload and decision proven by the run's secret)"
    if report.meta.world_size <= 1:  # a laptop's single process: nobody else reports, nothing to prove
        return "not needed (one process: no other rank sends it anything)"
    return ("no (no PREFLIGHT_SECRET: another program that reaches MASTER_ADDR:MASTER_PORT could send a false report; "
            "preflight launch and the sbatch scripts set one)")


def exclude_text(report: JobReport) -> str:
    """`--exclude=node[07-08]`, or empty when no host is bad."""
    return f"--exclude={compress_hostlist(report.bad_hosts)}" if report.bad_hosts else ""


def skip_reasons(report: JobReport) -> dict[str, int]:
    """Why checks did not apply -> how many, most common first (e.g. {"no NVIDIA driver": 23})."""
    reasons: dict[str, int] = {}
    for outcome in report.checks:
        if outcome.status == Severity.SKIPPED:
            reasons[outcome.reason or "did not apply"] = reasons.get(outcome.reason or "did not apply", 0) + 1
    return dict(sorted(reasons.items(), key=lambda item: (-item[1], item[0])))


def finding_counts(findings: Sequence[Finding]) -> list[str]:
    """`1 error`, `2 could not run`, `3 warnings`: the one count of findings the verdict line and the
    check summary both quote, so the two always agree (info findings are not in it)."""
    counts = {s: sum(1 for f in findings if f.severity == s) for s in (Severity.ERROR, Severity.COULD_NOT_RUN,
                                                                        Severity.WARN)}
    parts = []
    if counts[Severity.ERROR]:
        parts.append(f"{counts[Severity.ERROR]} error{'' if counts[Severity.ERROR] == 1 else 's'}")
    if counts[Severity.COULD_NOT_RUN]:
        parts.append(f"{counts[Severity.COULD_NOT_RUN]} could not run")
    if counts[Severity.WARN]:
        parts.append(f"{counts[Severity.WARN]} warning{'' if counts[Severity.WARN] == 1 else 's'}")
    return parts


def check_summary(report: JobReport) -> str:
    """`48 passed, 23 skipped (no NVIDIA driver); 1 error, 1 info`: skipped is not passed.

    Passed: the check ran and found nothing above info. Skipped: it did not apply here, with the
    reason. After the semicolon the findings, counted as the verdict line counts them
    (finding_counts), then the info findings."""
    statuses = [outcome.status for outcome in report.checks]
    passed = sum(1 for status in statuses if status in (Severity.OK, Severity.INFO))
    parts = [f"{passed} passed"]
    reasons = skip_reasons(report)
    if reasons:
        why = "; ".join(reason if len(reasons) == 1 else f"{count} {reason}" for reason, count in reasons.items())
        parts.append(f"{sum(reasons.values())} skipped ({why})")
    found = finding_counts(report.findings)
    info = sum(1 for f in report.findings if f.severity == Severity.INFO)
    if info:
        found.append(f"{info} info")
    return ", ".join(parts) + "; " + (", ".join(found) or "no findings")


def wants_rich(stream: TextIO) -> bool:
    """Rich only on a real terminal without NO_COLOR; logs get plain text. (Here, not in terminal.py:
    asking must not import rich, which a quiet run never uses.)"""
    return stream.isatty() and "NO_COLOR" not in os.environ
