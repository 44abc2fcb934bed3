"""The probe table the text and terminal reports both show: one row per dimension x op x size.

The median algbw of the dimension's groups and their busbw (min / median / max), as nccl-tests
prints the two side by side, the slowest group with its ranks and
hosts, the expected rate and where it came from (`--expect`, a hardware profile of
docs/expectations.md, or none) and the slowest group's figure as a fraction of its
link's nominal rate, where the link rate was readable (NVLink via NVML, IB via sysfs).
"""

from __future__ import annotations

from preflight.lib.hostlist import host_ranges, rank_ranges
from preflight.lib.units import human_bytes, percent
from preflight.model import JobReport, summarize_probes
from preflight.reports.probe_dims import expected_busbw

TITLE = ("collective probes, GB/s (1e9 B/s): algbw (bytes / time) median of each dimension's groups, then "
         "busbw (as nccl-tests scales it) min / median / max over them")
HEADERS = ["dim", "op", "size", "groups", "algbw", "min", "median", "max", "slowest group", "expected",
           "of nominal", "data"]
WHOLE = ["dim", "op", "size", "groups", "algbw", "min", "median", "max", "of nominal", "data"]  # never wrapped
KEYS = ["dim", "op", "size"]  # what a row is about: repeated when a narrow terminal splits the table


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _expected(gbps: float | None, source: str, explicit: float | None) -> str:
    """The expectation and where it came from: `300 (--expect)`, `369 (profile H100 ...)`, or `none`."""
    if gbps is not None and source:
        return f"{gbps:g} ({source})"
    if explicit is not None:  # a report written before expectations carried their source
        return f"{explicit:g} (--expect)"
    return "none"


def probe_rows(report: JobReport) -> list[list[str]]:
    """Rows for HEADERS, in the order the probes ran; empty when no probe ran."""
    expected = expected_busbw(report)
    rows = []
    for s in summarize_probes(report.probes):
        slowest = (f"#{s.slowest_group} ranks {rank_ranges(s.slowest_ranks, limit=3)} on "
                   f"{host_ranges(s.slowest_hosts, limit=24)}, {_time(s.time_s)}/op")
        fraction = f"{percent(s.busbw_min_gbps / s.nominal_gbps)}" if s.nominal_gbps else ""
        rows.append([s.dim, s.op, human_bytes(s.size_bytes), str(s.groups), f"{s.algbw_median_gbps:.3g}",
                     f"{s.busbw_min_gbps:.3g}",
                     f"{s.busbw_median_gbps:.3g}", f"{s.busbw_max_gbps:.3g}", slowest,
                     _expected(s.expected_gbps, s.expected_source, expected.get(s.dim)), fraction,
                     "ok" if s.verified else "WRONG"])
    return rows
