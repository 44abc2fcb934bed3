"""Severities, exit codes, findings and check outcomes: what the checks say."""

from __future__ import annotations

import enum
from typing import Any

from msgspec import Struct, field


class Severity(str, enum.Enum):
    """How bad a finding is. COULD_NOT_RUN is never a pass: the check did not answer.

    SKIPPED is only a check's status, never a finding's: the check did not apply here (a GPU
    check on a machine without an NVIDIA driver) and says why (`CheckOutcome.reason`). It is
    neither a pass nor a failure, and ranks below OK: a check that applied on one rank and
    passed there is a pass for the job.
    """

    SKIPPED = "skipped"
    OK = "ok"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"
    COULD_NOT_RUN = "could-not-run"

    @property
    def rank(self) -> int:
        """Order for "worst of": skipped < ok < info < warn < could-not-run < error."""
        return _SEVERITY_ORDER[self]


_SEVERITY_ORDER = {
    Severity.SKIPPED: -1,
    Severity.OK: 0,
    Severity.INFO: 1,
    Severity.WARN: 2,
    Severity.COULD_NOT_RUN: 3,
    Severity.ERROR: 4,
}


class ExitCode(enum.IntEnum):
    """The verdict as a process exit status, the same on every rank."""

    PASSED = 0
    WARNINGS_STRICT = 1
    BAD_INPUT = 2
    FAILED = 3
    INCOMPLETE = 4


class Finding(Struct):
    """One thing a check found: stable id, severity, a one-line message and what to do."""

    check_id: str
    severity: Severity
    message: str
    hint: str = ""
    ranks: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    blames_host: bool = False  # its check blames the hosts it names (the verdict's exclude list)
    # Its hosts say where the problem showed, not who caused it (a slow group: the localization
    # findings name the culprit), so even as an error it puts no host on the exclude list.
    context_only: bool = False


def culprit_order(finding: Finding) -> tuple[int, bool, int, int, str, str]:
    """The one order of findings every view uses (verdict line, text, terminal, HTML, "What to do",
    JSON, JUnit): worst severity first; then a finding about its culprit before one about where a
    problem only showed (`context_only`: a slow group); then the fewest ranks, the fewest hosts
    (a rank that slows two groups, BW004, before the groups, BW003); then by id and message."""
    wide = 1 << 30
    return (-finding.severity.rank, finding.context_only, len(finding.ranks) or wide, len(finding.hosts) or wide,
            finding.check_id, finding.message)


class CheckOutcome(Struct):
    """That a check ran, did not apply (skipped, with the reason) or could not run, so reports
    can list passes and skips too (JUnit testcases)."""

    check_id: str
    tag: str
    scope: str
    title: str
    status: Severity  # worst severity it produced; OK when silent; SKIPPED when it did not apply
    duration_s: float = 0.0
    reason: str = ""  # SKIPPED: why it did not apply ("no NVIDIA driver"), short and shared by like checks
