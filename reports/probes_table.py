"""The probe table both text renderers show: one row per dimension x op x size."""

from __future__ import annotations

from preflight.model import JobReport, summarize_probes
from preflight.reports.common import rank_ranges

HEADERS = ["dim", "op", "size", "groups", "busbw min", "median", "max GB/s", "slowest group", "time/op", "ok"]


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def probe_rows(report: JobReport) -> list[list[str]]:
    """Rows for HEADERS, in the order the probes ran; empty when no probe ran."""
    return [
        [s.dim, s.op, _size(s.size_bytes), str(s.groups), f"{s.busbw_min_gbps:.3g}", f"{s.busbw_median_gbps:.3g}",
         f"{s.busbw_max_gbps:.3g}", f"#{s.slowest_group} (ranks {rank_ranges(s.slowest_ranks)})", _time(s.time_s),
         "yes" if s.verified else "WRONG"]
        for s in summarize_probes(report.probes)
    ]
