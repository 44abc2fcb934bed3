"""Step 8's arithmetic: from findings to one verdict, one exit code and the bad hosts."""

from __future__ import annotations

from collections.abc import Sequence

from preflight.model import ExitCode, Finding, Severity

VERDICT_TEXT = {
    ExitCode.PASSED: "passed",
    ExitCode.WARNINGS_STRICT: "passed with warnings (--strict)",
    ExitCode.FAILED: "failed",
    ExitCode.INCOMPLETE: "incomplete",
}


def decide_exit_code(findings: Sequence[Finding], *, strict: bool, interrupted: bool = False) -> ExitCode:
    """3 on any error, else 4 when something could not run or the run was cut short,
    else 1 on warnings under --strict, else 0."""
    severities = {f.severity for f in findings}
    if Severity.ERROR in severities:
        return ExitCode.FAILED
    if Severity.COULD_NOT_RUN in severities or interrupted:
        return ExitCode.INCOMPLETE
    if strict and Severity.WARN in severities:
        return ExitCode.WARNINGS_STRICT
    return ExitCode.PASSED


def verdict_text(code: ExitCode, findings: Sequence[Finding]) -> str:
    """`passed`, `passed with warnings`, `failed`, `incomplete`."""
    if code == ExitCode.PASSED and any(f.severity == Severity.WARN for f in findings):
        return "passed with warnings"
    return VERDICT_TEXT.get(code, "incomplete")


def explain_verdict(code: ExitCode, findings: Sequence[Finding]) -> str:
    """One line: why this verdict."""
    count = {s: sum(1 for f in findings if f.severity == s) for s in Severity}
    parts = []
    if count[Severity.ERROR]:
        parts.append(f"{count[Severity.ERROR]} error(s)")
    if count[Severity.COULD_NOT_RUN]:
        parts.append(f"{count[Severity.COULD_NOT_RUN]} could not run")
    if count[Severity.WARN]:
        parts.append(f"{count[Severity.WARN]} warning(s)")
    if not parts:
        return "every check passed"
    first = next((f for f in findings if f.severity == Severity.ERROR), None) or findings[0]
    return f"{', '.join(parts)}; first: {first.check_id} {first.message}"


def bad_hosts(findings: Sequence[Finding], all_hosts: Sequence[str]) -> list[str]:
    """Hosts to exclude: those named by an error finding whose check blames hosts
    (`@check(..., blames_host=True)`, e.g. a missing rank or a dead link), or that names only some hosts.

    An error on every host is the job's configuration, not a node's fault; excluding
    every node would help nobody.
    """
    everyone = set(all_hosts)
    bad: set[str] = set()
    for finding in findings:
        if finding.severity != Severity.ERROR or not finding.hosts:
            continue
        named = set(finding.hosts)
        if finding.blames_host or not named >= everyone:
            bad |= named
    return sorted(bad)
