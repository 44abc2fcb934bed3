"""Where rank 0 writes the reports: a run's `--json/--html/...` options, or `preflight report`'s."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReportTargets:
    """Where rank 0 writes the reports (`preflight report` re-renders to the same targets)."""

    json: str | None = None  # --json: the JobReport
    html: str | None = None  # --html: self-contained HTML
    junit: str | None = None  # --junit: JUnit XML
    text: str | None = None  # --text: the plain text report
    exclude: str | None = None  # --exclude-file: bad hosts, one per line
    quiet: bool = False  # --quiet: nothing on stdout
