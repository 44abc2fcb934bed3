"""This run against the history: figures below a subject's own past, and hosts that fail often.

The own-past rule, per subject (a host, or a GPU by UUID) and per comparable figure (same
kind, dim, op, message size and group shape: `FigureRow.key`), at each (dim, op)'s largest
size: the subject's last WINDOW figures from runs in which it was healthy (not on the
verdict's exclude list) are its own record. With at least MIN_RUNS of them, the figure is
named when it is below (1 - MARGIN) x their 10th percentile. The 10th percentile is the
subject's own noise floor: nine in ten of its healthy runs reached it, so a figure a
further 25% below it is outside what that subject's noise has produced, whatever its
siblings in this job measured (a whole job slowed the same way passes the straggler rule,
not this one). MIN_RUNS keeps a young history from judging. A subject is named only when
every figure of it the history can judge is below its own past (a healthy host sharing one
slow group with a slow host is cleared by its other groups). The finding says what changed
and by how much: the figure, its median, its p10, how many runs.

Flaky: a host that failed (was on the exclude list) in at least `failures` of its last
`window` recorded runs, before this one (`--flaky K/N`, default 3/10).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Connection, and_, select

from preflight.history import schema
from preflight.history.record import COLLECTIVE, STORAGE_KINDS
from preflight.model.history_records import Drop, FigureRow, Flaky, OwnPast

WINDOW = 30  # the last healthy runs a subject's figure is compared with
MIN_RUNS = 5  # fewer and the history does not judge
MARGIN = 0.25  # below (1 - MARGIN) x the subject's own p10
HISTORY_SOURCE = "history"  # ProbeResult.expected_source's prefix when the expectation came from here


def own_past(conn: Connection, row: FigureRow, window: int = WINDOW) -> OwnPast:
    """The subject's last `window` healthy figures comparable with `row` (indexed by subject, newest first)."""
    f, h = schema.figures, schema.run_hosts
    query = (select(f.c.value).select_from(f.join(h, and_(h.c.run_pk == f.c.run_pk, h.c.host == f.c.host)))
             .where(f.c.subject == row.subject, f.c.kind == row.kind, f.c.dim == row.dim, f.c.op == row.op,
                    f.c.size_bytes == row.size_bytes, f.c.group_size == row.group_size,
                    f.c.group_hosts == row.group_hosts, h.c.failed.is_(False))
             .order_by(f.c.run_pk.desc()).limit(window))
    return OwnPast(row.subject, row.key, [float(v) for v in conn.execute(query).scalars()])


def judged_rows(rows: Sequence[FigureRow]) -> list[FigureRow]:
    """The rows the rule looks at: each (kind, dim, op)'s largest size (smaller ones measure latency).

    A collective's figure is its group's: it is judged per host (its per-GPU copies keep the
    GPU's record but would only repeat the host's finding once per GPU); a device probe's
    figure is one GPU's own, and is judged per GPU.
    """
    rows = [r for r in rows if not (r.kind == COLLECTIVE and r.gpu_uuid)]
    largest: dict[tuple[str, str, str], int] = {}
    for r in rows:
        largest[(r.kind, r.dim, r.op)] = max(largest.get((r.kind, r.dim, r.op), 0), r.size_bytes)
    return [r for r in rows if r.size_bytes == largest[(r.kind, r.dim, r.op)]]


def drops(conn: Connection, rows: Sequence[FigureRow], *, min_runs: int = MIN_RUNS) -> tuple[list[Drop], list[OwnPast]]:
    """(figures below their subject's own past, every record consulted) for this run's judged rows.

    A subject in several groups of one (dim, op) (a host in two dp groups) is judged on its
    best figure of them, and a subject is named only when every figure of it the history
    can judge is below its own past: a healthy host that shares one slow group with a slow
    host measures normally in its other groups, and is cleared by them. (With one group per
    host, the whole world as one group, every member of a slow group is named: collectives
    cannot tell its members apart.)
    """
    best: dict[tuple[str, tuple[str, str, str, int, int, int]], FigureRow] = {}
    for r in judged_rows(rows):
        k = (r.subject, r.key)
        if k not in best or r.value > best[k].value:
            best[k] = r
    found: dict[tuple[str, str], list[Drop]] = {}
    cleared: set[tuple[str, str]] = set()
    consulted = []
    for row in best.values():
        past = own_past(conn, row)
        consulted.append(past)
        if len(past.values) < min_runs:
            continue
        if row.value < (1 - MARGIN) * past.p10:
            found.setdefault(_clearing(row), []).append(Drop(row, past, MARGIN))
        else:
            cleared.add(_clearing(row))
    return [d for key, dropped in found.items() if key not in cleared for d in dropped], consulted


def _clearing(row: FigureRow) -> tuple[str, str]:
    """What one healthy figure clears: the subject's other figures, except a storage rate, which is its own
    path (a host's fast links say nothing of its checkpoint mount, nor its reads of its writes)."""
    return (row.subject, row.kind if row.kind in STORAGE_KINDS.values() else "")


def flaky_hosts(conn: Connection, hosts: Iterable[str], failures: int, window: int) -> list[Flaky]:
    """The hosts among `hosts` that failed in at least `failures` of their last `window` runs."""
    h, r = schema.run_hosts, schema.runs
    out = []
    for host in sorted(set(hosts)):
        rows = conn.execute(select(h.c.failed, r.c.run_id).select_from(h.join(r, r.c.id == h.c.run_pk))
                            .where(h.c.host == host).order_by(h.c.run_pk.desc()).limit(window)).all()
        failed = [run_id for was_failed, run_id in rows if was_failed]
        if len(failed) >= failures:
            out.append(Flaky(host, len(failed), len(rows), failed))
    return out


def all_flaky(conn: Connection, failures: int, window: int) -> list[Flaky]:
    """Every host of the history that is flaky by the rule (`preflight history exclude --flaky`)."""
    hosts = conn.execute(select(schema.run_hosts.c.host).where(schema.run_hosts.c.failed.is_(True))
                         .distinct()).scalars()
    return flaky_hosts(conn, list(hosts), failures, window)
