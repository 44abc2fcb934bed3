"""Probe results organised for reading: per mesh dimension, per op, judged at the largest size."""

from __future__ import annotations

import statistics
from collections import defaultdict

from msgspec import Struct

from preflight.model import JobReport, ProbeResult


def expected_busbw(report: JobReport) -> dict[str, float]:
    """Expected busbw (GB/s) per dimension, as `--expect` gave it (empty when none was)."""
    return dict(report.meta.expected_busbw_gbps)


def probe_dimensions(report: JobReport) -> dict[str, list[ProbeResult]]:
    """Probe results grouped by mesh dimension, in the order they were probed.

    The probes run the plan's steps in the mesh's order, outermost first, then the whole
    world, and the results keep that order; the report needs no mesh text to sort them.
    """
    dims: dict[str, list[ProbeResult]] = {}
    for result in report.probes:
        dims.setdefault(result.dim, []).append(result)
    return dims


def by_op(results: list[ProbeResult]) -> dict[str, list[ProbeResult]]:
    """Results of one dimension grouped by op, ops sorted by name."""
    ops: dict[str, list[ProbeResult]] = defaultdict(list)
    for result in results:
        ops[result.op].append(result)
    return dict(sorted(ops.items()))


class LargestSize(Struct):
    """One op of one dimension at its largest message size: the figure the verdict judges."""

    dim: str
    op: str
    size_bytes: int
    groups: list[ProbeResult]  # sorted by group index
    median_gbps: float
    slowest: ProbeResult


def largest_size(dim: str, results: list[ProbeResult]) -> list[LargestSize]:
    """Per op: the groups at the largest size, their median busbw and the slowest group."""
    out = []
    for op, rows in by_op(results).items():
        size = max(r.size_bytes for r in rows)
        groups = sorted((r for r in rows if r.size_bytes == size), key=lambda r: r.group_index)
        median = statistics.median(r.busbw_gbps for r in groups)
        out.append(LargestSize(dim, op, size, groups, median, min(groups, key=lambda r: r.busbw_gbps)))
    return out
