"""`--json PATH`: the JobReport itself, the input of `preflight report`."""

from __future__ import annotations

import json
from pathlib import Path

from preflight.model import JobReport


def dumps(report: JobReport) -> str:
    """The report as indented JSON."""
    return json.dumps(report.to_dict(), indent=1, sort_keys=False)


def write(report: JobReport, path: str) -> None:
    """Write the report's JSON to path, creating parent folders."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dumps(report) + "\n")


def load(path: str) -> JobReport:
    """Read a report written by `write` (raises OSError / ValueError / KeyError)."""
    return JobReport.from_dict(json.loads(Path(path).read_text()))
