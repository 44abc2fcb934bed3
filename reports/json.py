"""`--json PATH`: the JobReport itself, the input of `preflight report`."""

from __future__ import annotations

from pathlib import Path

import msgspec

from preflight.model import JobReport, summarize_probes
from preflight.model.codec import decode, encode

SCHEMA = 1


def dumps(report: JobReport) -> str:
    """The report as indented JSON, with the derived per-dimension probe summary beside it."""
    head = encode({"schema": SCHEMA, "probe_summary": summarize_probes(report.probes)})
    body = encode(report)
    # One object: the report's own fields, then the derived ones (never read back).
    merged = body[:-1] + b"," + head[1:] if body != b"{}" else head
    return msgspec.json.format(merged, indent=1).decode()


def write(report: JobReport, path: str) -> None:
    """Write the report's JSON to path, creating parent folders."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dumps(report) + "\n")


def load(path: str | Path) -> JobReport:
    """Read a report written by `write` (raises OSError, or BadPayload when it is not one)."""
    return decode(Path(path).read_bytes(), JobReport)
