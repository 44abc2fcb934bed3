"""--metrics PATH: the run's verdict and figures in the Prometheus text format, for node_exporter.

Written through the maintained `prometheus-client` library (its registry and
`write_to_textfile`, which writes a temporary file beside PATH and renames it over PATH, so
node_exporter's textfile collector never reads half a file). Point PATH into the folder of
node_exporter's `--collector.textfile.directory` with a `.prom` name. Names follow
Prometheus' naming rules: the `preflight_` prefix, base units (seconds, bytes per second)
as suffixes; the list is in docs/history.md.
"""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from preflight.lib.grouping import ranks_per_host
from preflight.lib.iso_time import epoch
from preflight.model import JobReport

FIGURE_LABELS = ("host", "gpu", "rank", "dimension", "op", "size_bytes", "group")
GB = 1e9  # the probes' GB/s are 1e9 bytes per second


def build_registry(report: JobReport) -> CollectorRegistry:
    """Every metric of one run in a fresh registry."""
    registry = CollectorRegistry(auto_describe=True)

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(name, doc, labels, registry=registry)

    meta = report.meta
    gauge("preflight_run_exit_code", "Exit code of the last preflight run (0 passed, 1 warnings with --strict, "
          "3 failed, 4 incomplete)").set(report.exit_code)
    gauge("preflight_run_passed", "1 when the last run passed (warnings allowed), else 0").set(
        1 if report.exit_code == 0 else 0)
    gauge("preflight_run_timestamp_seconds", "When the last run finished, seconds since the epoch").set(
        epoch(meta.finished_at or meta.started_at))
    gauge("preflight_run_duration_seconds", "How long the last run took").set(meta.duration_s)
    gauge("preflight_run_world_size", "Ranks of the last run").set(meta.world_size)
    gauge("preflight_run_info", "The last run's identity and verdict (always 1)",
          ("run_id", "job_id", "verdict", "mesh", "backend")).labels(
        meta.run_id, meta.job_id, report.verdict, meta.mesh, meta.backend).set(1)
    findings = gauge("preflight_findings", "Findings of the last run per check id and severity",
                     ("check_id", "severity"))
    for (check_id, severity), count in sorted(Counter((f.check_id, f.severity.value) for f in report.findings).items()):
        findings.labels(check_id, severity).set(count)
    excluded = gauge("preflight_host_excluded", "1 when the last run put the host on its exclude list", ("host",))
    bad = set(report.bad_hosts)
    for host in sorted(ranks_per_host(report.ranks).keys() | bad):  # a loaded report's host column
        excluded.labels(host).set(1 if host in bad else 0)
    busbw = gauge("preflight_collective_busbw_bytes_per_second",
                  "Bus bandwidth of a collective (nccl-tests' busbw) on the rank's group", FIGURE_LABELS)
    seconds = gauge("preflight_collective_time_seconds", "Time per op of a collective on the rank's group "
                    "(its slowest rank's)", FIGURE_LABELS)
    gpu_of = {d.rank: d.uuid for d in report.probe_devices}
    for r in report.probes:
        if not r.verified:
            continue
        for rank, host in zip(r.ranks, r.hosts):
            labels = (host, gpu_of.get(rank, ""), str(rank), r.dim, r.op, str(r.size_bytes), str(r.group_index))
            busbw.labels(*labels).set(r.busbw_gbps * GB)
            seconds.labels(*labels).set(r.time_s)
    return registry


def write_metrics(report: JobReport, path: str) -> None:
    """Write the run's metrics to path atomically (a temporary file renamed over it)."""
    write_to_textfile(path, build_registry(report))
