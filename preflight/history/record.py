"""One finished run as history rows: the run, its hosts, GPUs, findings and every figure.

`figure_rows(report)` is the one place a JobReport's measurements become `FigureRow`s:
collectives today (one row per host a group spans, and one per GPU UUID where the probe bound
one); the storage family's per-host write and read rates (kinds STORAGE_KINDS, first pass: the
same shape every run); the device probes add theirs here, as rows of their own `kind` keyed by GPU
UUID, and the history's tables, judge, CLI and metrics take them without a schema change.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec.structs import asdict
from sqlalchemy import Connection, insert

from preflight import __version__
from preflight.history import schema
from preflight.lib.iso_time import epoch
from preflight.model import JobReport, ProbeDevice, ProbeResult
from preflight.model.history_records import FigureRow
from preflight.model.storage import StorageSection

COLLECTIVE = "collective"
BUSBW_UNIT = "GB/s"
STORAGE_KINDS = {"write": "storage_write", "read": "storage_read"}  # the checkpoint path's rates, per host


def figure_rows(results: Sequence[ProbeResult], devices: Sequence[ProbeDevice],
                storage: StorageSection | None = None) -> list[FigureRow]:
    """Every figure of the run, per host (and per GPU where the probes bound one; per host for storage)."""
    rows = storage_rows(storage) if storage is not None else []
    gpu_of = {d.rank: d.uuid for d in devices if d.uuid}
    for r in results:
        if not r.verified:
            continue  # wrong data: its speed means nothing
        shape = {"kind": COLLECTIVE, "value": r.busbw_gbps, "unit": BUSBW_UNIT, "dim": r.dim, "op": r.op,
                 "group_index": r.group_index, "group_size": len(r.ranks), "group_hosts": len(set(r.hosts)),
                 "size_bytes": r.size_bytes}
        for host in sorted(set(r.hosts)):
            rows.append(FigureRow(subject=host, host=host, **shape))
        for rank, host in zip(r.ranks, r.hosts):
            if rank in gpu_of:
                rows.append(FigureRow(subject=gpu_of[rank], host=host, gpu_uuid=gpu_of[rank], **shape))
    return rows


def storage_rows(section: StorageSection) -> list[FigureRow]:
    """Each host's first-pass write and read rate on the checkpoint path; comparable across runs with the same
    share per rank, ranks on the host and hosts writing at once (the key's size, group size and group hosts)."""
    writing = sum(1 for h in section.hosts if h.write_gbps is not None)
    rows = []
    for host in section.hosts:
        for figure, kind in STORAGE_KINDS.items():
            value = host.write_gbps if figure == "write" else host.read_gbps
            if value is not None:
                rows.append(FigureRow(kind=kind, subject=host.host, value=value, unit=BUSBW_UNIT, host=host.host,
                                      dim="storage", op=figure, size_bytes=section.share_bytes,
                                      group_size=len(host.ranks), group_hosts=writing))
    return rows


def write_run(conn: Connection, report: JobReport) -> int:
    """Insert one run with everything it knows, on the caller's transaction; its row id."""
    meta = report.meta
    run_pk = conn.execute(insert(schema.runs).returning(schema.runs.c.id).values(
        run_id=meta.run_id or meta.run_nonce or "", job_id=meta.job_id, launcher=meta.launcher,
        started_at=epoch(meta.started_at), finished_at=epoch(meta.finished_at or meta.started_at),
        world_size=meta.world_size, num_nodes=meta.num_nodes, mesh=meta.mesh, backend=meta.backend,
        verdict=report.verdict, exit_code=report.exit_code, version=__version__,
        command_line=meta.command_line[:4000])).scalar_one()
    ranks_of: dict[str, list[int]] = {}
    for facts in report.ranks:
        ranks_of.setdefault(facts.host, []).append(facts.rank)
    bad = set(report.bad_hosts)
    hosts = [{"run_pk": run_pk, "host": host, "ranks": ",".join(map(str, sorted(ranks))), "failed": host in bad}
             for host, ranks in sorted(ranks_of.items())]
    gpus = [{"run_pk": run_pk, "host": facts.host, "gpu_index": g.index, "uuid": g.uuid,
             "serial": g.serial, "name": g.name, "pci_bus_id": g.pci_bus_id}
            for facts in report.ranks for g in facts.gpus]
    gpus = list({(g["host"], g["uuid"], g["gpu_index"]): g for g in gpus}.values())  # a host's GPUs, once
    found = [{"run_pk": run_pk, "check_id": f.check_id, "severity": f.severity.value, "message": f.message[:2000],
              "hosts": ",".join(f.hosts), "ranks": ",".join(map(str, f.ranks))} for f in report.findings]
    figures = [{"run_pk": run_pk, **asdict(row)}
               for row in figure_rows(report.probes, report.probe_devices, report.storage)]
    for table, rows in ((schema.run_hosts, hosts), (schema.run_gpus, gpus), (schema.findings, found),
                        (schema.figures, figures)):
        if rows:
            conn.execute(insert(table), rows)
    return run_pk
