"""Judgment of the measurements, on rank 0: pure functions of ProbeResults.

Only the largest size is judged (small messages measure latency, not bandwidth), never an
average over sizes. A group is a straggler when its busbw is below --straggler-ratio times
the median of its siblings (the other groups of the same dimension and op).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from preflight.model import ProbeResult
from preflight.model.probe_faults import Straggler

EXPECT_FRACTION = 0.9


def largest(results: list[ProbeResult]) -> list[ProbeResult]:
    """The results at the largest size measured for each (dim, op)."""
    top: dict[tuple[str, str], int] = {}
    for r in results:
        top[(r.dim, r.op)] = max(top.get((r.dim, r.op), 0), r.size_bytes)
    return [r for r in results if r.size_bytes == top[(r.dim, r.op)]]


def stragglers(results: list[ProbeResult], ratio: float) -> list[Straggler]:
    """Groups below ratio x their siblings' median busbw (dimensions with 2+ groups only)."""
    by_dim_op: dict[tuple[str, str], list[ProbeResult]] = defaultdict(list)
    for r in largest(results):
        by_dim_op[(r.dim, r.op)].append(r)
    out = []
    for members in by_dim_op.values():
        for r in members:
            siblings = [s.busbw_gbps for s in members if s is not r]
            if not siblings:
                continue
            median = statistics.median(siblings)
            if median > 0 and r.busbw_gbps < ratio * median:
                out.append(Straggler(r.dim, r.op, r.size_bytes, r.group_index, list(r.ranks), list(r.hosts),
                                     r.busbw_gbps, median))
    return out


def cross_dim_suspects(slow: list[Straggler]) -> dict[int, list[str]]:
    """Ranks that sit in slow groups of two or more dimensions: rank -> those dimensions."""
    dims: dict[int, set[str]] = defaultdict(set)
    for s in slow:
        for rank in s.ranks:
            dims[rank].add(s.dim)
    return {rank: sorted(d) for rank, d in sorted(dims.items()) if len(d) >= 2}


@dataclass
class BelowExpected:
    """A group whose busbw is under 0.9 x the --expect figure of its dimension."""

    result: ProbeResult
    expected_gbps: float


def below_expected(results: list[ProbeResult], expect: dict[str, float]) -> list[BelowExpected]:
    """Every group, at the largest size, below EXPECT_FRACTION x its dimension's expected busbw."""
    return [BelowExpected(r, expect[r.dim]) for r in largest(results)
            if r.dim in expect and r.busbw_gbps < EXPECT_FRACTION * expect[r.dim]]


def spanning_groups(groups: list[list[int]], hosts: dict[int, str]) -> list[tuple[int, list[int], list[str]]]:
    """(group index, ranks, hosts) of the groups whose ranks are on more than one host."""
    out = []
    for index, ranks in enumerate(groups):
        names = sorted({hosts.get(r, "") for r in ranks} - {""})
        if len(names) > 1:
            out.append((index, ranks, names))
    return out


def intra_host_dim(dim_names: list[str]) -> str | None:
    """The dimension that should stay inside a host: tp, else the innermost of a 2+-dim mesh."""
    if "tp" in dim_names:
        return "tp"
    return dim_names[-1] if len(dim_names) > 1 else None
