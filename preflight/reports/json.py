"""`--json PATH`: the JobReport itself, the input of `preflight report`.

The ranks' facts are written as a `RankTable` (preflight/model/rank_table.py): each distinct
section once and one small row per rank, so a 16,384-rank report is a few MB, not hundreds.
`load` reads that shape and the earlier one (schema 1, a verbatim `ranks` list) alike.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import msgspec

from preflight.model import JobReport, summarize_probes
from preflight.model.codec import BadPayload, decode, encode
from preflight.model.rank_table import RankTable, pack, unpack
from preflight.reports.targets import ensure_parent

SCHEMA = 2


@dataclass
class _Packed:
    """The fields the JSON adds to the report's own: the packed ranks (schema 2)."""

    rank_table: RankTable | None = None
    schema: int = 1  # a report without one is schema 1 (a verbatim `ranks` list)


def dumps_bytes(report: JobReport) -> bytes:
    """The report as indented JSON bytes: its fields with `ranks` packed, then derived ones beside them."""
    head = encode({"schema": SCHEMA, "rank_table": pack(report.ranks),
                   "probe_summary": summarize_probes(report.probes)})
    body = encode(dataclasses.replace(report, ranks=[]))
    # One object: the report's own fields, then the added ones (probe_summary is never read back).
    merged = body[:-1] + b"," + head[1:] if body != b"{}" else head
    return msgspec.json.format(merged, indent=1)


def dumps(report: JobReport) -> str:
    """dumps_bytes as text."""
    return dumps_bytes(report).decode()


def write(report: JobReport, path: str) -> None:
    """Write the report's JSON to path, creating parent folders."""
    target = Path(path)
    ensure_parent(target)
    target.write_bytes(dumps_bytes(report) + b"\n")


def loads(data: bytes | str) -> JobReport:
    """The JobReport of `dumps` (raises BadPayload when the data is not one, or is of a schema this
    preflight does not know: a newer one's fields would be dropped silently)."""
    added = decode(data, _Packed)
    if not 1 <= added.schema <= SCHEMA:
        raise BadPayload(f"schema {added.schema}: this preflight reads report schemas 1 to {SCHEMA}"
                         + (" (written by a newer preflight: upgrade to read it)" if added.schema > SCHEMA else ""))
    report = decode(data, JobReport)
    packed = added.rank_table
    if packed is not None and not report.ranks:
        report.ranks = unpack(packed)
    return report


def load(path: str | Path) -> JobReport:
    """Read a report written by `write` (raises OSError, or BadPayload when it is not one)."""
    return loads(Path(path).read_bytes())
