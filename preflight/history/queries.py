"""What `preflight history` shows: runs by filter, with their hosts, findings and figures.

Every query starts from an index (host -> runs, GPU UUID -> runs, check id -> runs, or the
runs themselves newest first) and stops at `last` runs, so one host's view of a history of
10,000 runs x 256 hosts reads a few hundred rows (benchmarks/history_query.py).
"""

from __future__ import annotations

import datetime

from sqlalchemy import Connection, Select, delete, select

from preflight.history import schema
from preflight.model.history_records import FigureView, HistoryFilters, RunView


def _candidates(filters: HistoryFilters) -> Select:
    """Run ids newest first, from the most selective index the filters allow (host, GPU, or the runs)."""
    r, h, g = schema.runs, schema.run_hosts, schema.run_gpus
    if filters.host:
        query = select(h.c.run_pk.label("id")).where(h.c.host == filters.host).order_by(h.c.run_pk.desc())
        owner = h.c.run_pk
    elif filters.gpu:
        query = select(g.c.run_pk.label("id")).where(g.c.uuid == filters.gpu).order_by(g.c.run_pk.desc())
        owner = g.c.run_pk
    else:
        return select(r.c.id).where(r.c.started_at >= (filters.since or 0.0)).order_by(r.c.id.desc())
    if filters.since is not None:
        query = query.join(r, r.c.id == owner).where(r.c.started_at >= filters.since)
    return query


def _run_ids(conn: Connection, filters: HistoryFilters) -> list[int]:
    query = _candidates(filters)
    if not (filters.check or (filters.gpu and filters.host)):
        return list(dict.fromkeys(conn.execute(query.limit(filters.last)).scalars()))
    ids: list[int] = []  # the other filters on the candidates, a page at a time: stop at `last` matches
    for chunk in conn.execute(query).scalars().partitions(500):
        ids += _matching(conn, list(dict.fromkeys(chunk)), filters)
        if len(ids) >= filters.last:
            break
    return ids[: filters.last]


def _matching(conn: Connection, ids: list[int], filters: HistoryFilters) -> list[int]:
    keep = set(ids)
    if filters.gpu and filters.host:
        g = schema.run_gpus
        keep &= set(conn.execute(select(g.c.run_pk).where(g.c.run_pk.in_(keep), g.c.uuid == filters.gpu)).scalars())
    if filters.check:
        f = schema.findings
        keep &= set(conn.execute(select(f.c.run_pk).where(f.c.run_pk.in_(keep),
                                                          f.c.check_id == filters.check.upper())).scalars())
    return [i for i in ids if i in keep]


def iso(seconds: float) -> str:
    """ISO 8601 in UTC, to the second."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(timespec="seconds")


def runs_shown(conn: Connection, filters: HistoryFilters) -> list[RunView]:
    """The runs the filters select, newest first, each with its hosts, GPUs, findings and figures.

    With --host (or --gpu) the figures are that subject's, the findings those naming it (or no host).
    """
    ids = _run_ids(conn, filters)
    if not ids:
        return []
    r, h, g, f, fig = schema.runs, schema.run_hosts, schema.run_gpus, schema.findings, schema.figures
    views = {row.id: RunView(row.run_id, row.job_id, iso(row.started_at), row.verdict, row.exit_code, row.world_size,
                             row.num_nodes, row.mesh, row.backend)
             for row in conn.execute(select(r).where(r.c.id.in_(ids)))}
    for row in conn.execute(select(h.c.run_pk, h.c.host, h.c.failed).where(h.c.run_pk.in_(ids))
                            .order_by(h.c.run_pk, h.c.host)):
        views[row.run_pk].hosts.append({"host": row.host, "failed": bool(row.failed)})
    gpus = select(g).where(g.c.run_pk.in_(ids))
    if filters.host:
        gpus = gpus.where(g.c.host == filters.host)
    if filters.gpu:
        gpus = gpus.where(g.c.uuid == filters.gpu)
    for row in conn.execute(gpus):
        views[row.run_pk].gpus.append({"host": row.host, "index": row.gpu_index, "uuid": row.uuid,
                                       "serial": row.serial, "name": row.name})
    found = select(f).where(f.c.run_pk.in_(ids))
    if filters.check:
        found = found.where(f.c.check_id == filters.check.upper())
    for row in conn.execute(found):
        hosts = [x for x in row.hosts.split(",") if x]
        if filters.host and hosts and filters.host not in hosts:
            continue
        views[row.run_pk].findings.append({"check_id": row.check_id, "severity": row.severity,
                                           "message": row.message, "hosts": hosts})
    figures = select(fig).where(fig.c.run_pk.in_(ids))
    subject = filters.gpu or filters.host
    if subject:
        figures = figures.where(fig.c.subject == subject)
    else:
        figures = figures.where(fig.c.gpu_uuid == "")  # per host; the GPU rows repeat them per GPU
    for row in conn.execute(figures):
        views[row.run_pk].figures.append(FigureView(row.subject, row.host, row.gpu_uuid, row.kind, row.dim, row.op,
                                                    row.size_bytes, row.group_size, row.group_hosts, row.value,
                                                    row.unit))
    return [views[i] for i in ids if i in views]


def prune(conn: Connection, older_than: float) -> int:
    """Delete the runs that started before `older_than` (seconds since the epoch), with their rows; how many."""
    r = schema.runs
    ids = list(conn.execute(select(r.c.id).where(r.c.started_at < older_than)).scalars())
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for table in (schema.figures, schema.findings, schema.run_gpus, schema.run_hosts):
            conn.execute(delete(table).where(table.c.run_pk.in_(chunk)))
        conn.execute(delete(r).where(r.c.id.in_(chunk)))
    return len(ids)
