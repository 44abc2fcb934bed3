"""`--json PATH`: the JobReport itself, the input of `preflight report`.

The ranks' facts are written as a `RankTable` (preflight/model/rank_table.py): each distinct
section once and the ranks' own values as columns (schema 3), so a 131,072-rank report is tens
of MB, not gigabytes. The report is indented; the rank table, the bulk of a large report, is
written compact (one line: indenting puts every cell of a column on a line of its own).
`load` reads that shape and the earlier ones (schema 2, a row per rank; schema 1, a verbatim
`ranks` list) alike.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import msgspec
from msgspec import Struct

from preflight.lib.collector import collector_paused
from preflight.lib.files import ensure_parent
from preflight.model import JobReport, summarize_probes
from preflight.model.codec import BadPayload, decode, encode
from preflight.model.rank_table import Packed, RankTable, packed
from preflight.model.rank_unpack import unpack
from preflight.model.table_ranks import TableRanks

SCHEMA = 5  # 4: the host parts of health and placement once per distinct value (model/host_parts.py);
# 5: the hosts' RDMA ports apart from their network sections, once per distinct list
# The largest report `load` reads. A 131,072-rank job on GPU hosts writes ~520 MB (each rank's bound GPU's
# health and its placement are its own: benchmarks/rank0_scale.py --gpu-node), past the codec's 256 MiB
# for any other document; still bounded, for a file that is not one preflight wrote.
MAX_REPORT_BYTES = 1 << 30
_TABLE_SLOT = b'\n "rank_table": null'  # a top-level key (indent 1): nothing nested or quoted matches


class _Document(JobReport):
    """The report as its JSON holds it: the JobReport's own fields and those the JSON adds, the packed
    ranks (schemas 2 to 5), read in one parse (a second parse of a 131,072-rank report: 0.13 s)."""

    rank_table: RankTable | None = None
    schema: int = 1  # a report without one is schema 1 (a verbatim `ranks` list)


class _Schema(Struct):
    """Only the schema: read when the whole document did not decode, to say whether a newer preflight wrote it."""

    schema: int = 1


def dumps_bytes(report: JobReport) -> bytes:
    """The report as indented JSON bytes: its fields with `ranks` packed, then derived ones beside them."""
    before, table, after = _parts(report)
    return b"".join([before, *table, after])


def _parts(report: JobReport, spool_in: str | None = None) -> tuple[bytes, Iterator[bytes], bytes]:
    """The report's JSON in three parts (before the rank table, the table's pieces, after it): `write`
    writes them one after another, never holding a joined copy of a 100 MB report, and the encoded forms
    of the ranks' own parts in a temporary file in `spool_in` (rank_table.Spooled), not in memory."""
    head = encode({"schema": SCHEMA, "rank_table": None, "probe_summary": summarize_probes(report.probes)})
    body = encode(msgspec.structs.replace(report, ranks=[]))
    # One object: the report's own fields, then the added ones (probe_summary is never read back).
    merged = body[:-1] + b"," + head[1:] if body != b"{}" else head
    indented = msgspec.json.format(merged, indent=1)
    before, slot, after = indented.partition(_TABLE_SLOT)
    assert slot, "the rank table's place in the report"
    table = _table_pieces(packed(report.ranks, keep_own_parts=False, spool_in=spool_in))
    return before + b'\n "rank_table": ', table, after


def _table_pieces(source: Packed) -> Iterator[bytes]:
    """`encode(source.table)`, field by field and column by column: the same bytes (the codec writes a
    Struct as its fields in order, compact), without one more copy of the whole table at once; a
    table of distinct values is written from the encoded forms `pack` made of them (all that is kept of
    the ranks' own health and placement parts: `packed(..., keep_own_parts=False)`)."""
    try:
        yield from _table_fields(source)
    finally:
        source.close()


def _table_fields(source: Packed) -> Iterator[bytes]:
    table = source.table
    yield b"{"
    for i, item in enumerate(msgspec.structs.fields(table)):
        yield (b"," if i else b"") + encode(item.name) + b":"
        value = getattr(table, item.name)
        encoded = source.encoded.get(item.name)
        if encoded is not None:  # the codec's compact list of those values
            yield b"["
            for j, element in enumerate(encoded):
                if j:
                    yield b","
                yield element  # as it is: no copy of each of a 131,072-rank job's 16,384 host sections with its comma
            yield b"]"
            continue
        if item.name != "columns" or value is None:
            yield encode(value)
            continue
        yield b"{"
        for j, column in enumerate(msgspec.structs.fields(value)):
            yield (b"," if j else b"") + encode(column.name) + b":" + encode(getattr(value, column.name))
        yield b"}"
    yield b"}"


def dumps(report: JobReport) -> str:
    """dumps_bytes as text."""
    return dumps_bytes(report).decode()


def write(report: JobReport, path: str) -> None:
    """Write the report's JSON to path, creating parent folders."""
    target = Path(path)
    ensure_parent(target)
    with target.open("wb") as out:
        before, table, after = _parts(report, spool_in=str(target.parent))
        out.write(before)
        out.writelines(table)
        out.write(after + b"\n")


def loads(data: bytes | str) -> JobReport:
    """The JobReport of `dumps` (raises BadPayload when the data is not one, or is of a schema this
    preflight does not know: a newer one's fields would be dropped silently)."""
    # The collector paused for the whole read (131,072 ranks: millions of new objects, which each
    # automatic collection would rescan), then what was read frozen out of its generations: it
    # lives while the report is rendered, and re-enabled the collector would first rescan all of
    # it (1.5 s) and the renderers' allocations again. The report is acyclic data, which reference
    # counting frees as before. Reload + text + HTML at 131,072 ranks: 6.0 -> 2.0 s of CPU.
    with collector_paused():
        report = _loads(data)
        gc.freeze()
    return report


def _loads(data: bytes | str) -> JobReport:
    try:
        document = decode(data, _Document, max_bytes=MAX_REPORT_BYTES)
    except BadPayload as exc:
        _check_schema(_schema_of(data))  # a newer preflight's report: say that, not which field did not fit
        raise exc from None
    _check_schema(document.schema)
    report = JobReport(**{item.name: getattr(document, item.name) for item in msgspec.structs.fields(JobReport)})
    table = document.rank_table
    if table is not None and not report.ranks:
        try:  # schema 3 to 5's columns read by the renderers as they are (model/table_ranks.py); schema 2 unpacked
            report.ranks = TableRanks(table) if table.columns is not None else unpack(table)
        except (IndexError, ValueError) as exc:  # indices past their tables, columns of unequal length
            raise BadPayload(f"rank_table: {str(exc)[:200]}") from None
    return report


def _schema_of(data: bytes | str) -> int:
    """The schema a report says it has; 1 (one this preflight reads) where not even that decodes."""
    try:
        return decode(data, _Schema, max_bytes=MAX_REPORT_BYTES).schema
    except BadPayload:
        return 1


def _check_schema(schema: int) -> None:
    if not 1 <= schema <= SCHEMA:
        raise BadPayload(f"schema {schema}: this preflight reads report schemas 1 to {SCHEMA}"
                         + (" (written by a newer preflight: upgrade to read it)" if schema > SCHEMA else ""))


def load(path: str | Path) -> JobReport:
    """Read a report written by `write` (raises OSError, or BadPayload when it is not one)."""
    size = Path(path).stat().st_size
    if size > MAX_REPORT_BYTES:  # refused before it is read into memory
        raise BadPayload(f"{size} bytes is more than the maximum {MAX_REPORT_BYTES}")
    return loads(Path(path).read_bytes())
