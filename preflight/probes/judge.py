"""Judgment of the measurements, on rank 0: pure functions of ProbeResults.

Only the largest size is judged (small messages measure latency, not bandwidth), never an
average over sizes. A group is a straggler when two things hold (stragglers()):

1. ratio: its median busbw is below --straggler-ratio times the median of its siblings
   (the other groups of the same dimension and op);
2. dispersion: the spread the iterations show does not explain the gap: every one of its
   timed iterations is slower than every iteration of its healthy siblings (complete
   separation, a Mann-Whitney U of 0), and the chance of that from noise alone is at most
   MAX_FALSE_ALARM. If all iterations came from one distribution (no straggler) the chance
   that the n iterations of one group all fall below the m of its siblings is 1 / C(n+m, n):
   1/252 for 5 iterations against one sibling, 1/15504 against three.

Scheduler noise on a shared CPU is not independent across iterations (a descheduled process
slows several in a row), which is why a straggler is only a candidate until a second pass
confirms it (orchestrate: the step is measured again and must separate again).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from msgspec import Struct

from preflight.model import ProbeResult
from preflight.model.probe_faults import Straggler

EXPECT_FRACTION = 0.9
MAX_FALSE_ALARM = 0.01  # rule 2: the highest chance of a separation from noise alone that still names a group


def largest(results: list[ProbeResult]) -> list[ProbeResult]:
    """The results at the largest size measured for each (dim, op)."""
    top: dict[tuple[str, str], int] = {}
    for r in results:
        top[(r.dim, r.op)] = max(top.get((r.dim, r.op), 0), r.size_bytes)
    return [r for r in results if r.size_bytes == top[(r.dim, r.op)]]


def false_alarm_p(n_group: int, n_siblings: int) -> float:
    """Chance that n_group iterations all fall below n_siblings others drawn from the same distribution."""
    if n_group < 1 or n_siblings < 1:
        return 1.0
    return 1.0 / math.comb(n_group + n_siblings, n_group)


def _samples(r: ProbeResult) -> list[float]:
    return list(r.iter_busbw_gbps) or [r.busbw_gbps]


def stragglers(results: list[ProbeResult], ratio: float) -> list[Straggler]:
    """Groups below ratio x their siblings' median busbw whose iterations the spread does not explain.

    Dimensions with 2+ groups only. The siblings' samples are those of the siblings that are
    themselves above the ratio, so two slow groups of one dimension do not hide each other.
    """
    by_dim_op: dict[tuple[str, str], list[ProbeResult]] = defaultdict(list)
    for r in largest(results):
        by_dim_op[(r.dim, r.op)].append(r)
    out = []
    for members in by_dim_op.values():
        for r in members:
            siblings = [s for s in members if s is not r]
            if not siblings:
                continue
            median = statistics.median(s.busbw_gbps for s in siblings)
            if not (median > 0 and r.busbw_gbps < ratio * median):
                continue
            healthy = [x for s in siblings if s.busbw_gbps >= ratio * median for x in _samples(s)]
            mine = _samples(r)
            if not healthy or max(mine) >= min(healthy):
                continue  # some iteration of this group was as fast as a healthy sibling's: noise explains it
            p = false_alarm_p(len(mine), len(healthy))
            if p > MAX_FALSE_ALARM:
                continue  # too few iterations to tell a straggler from noise
            out.append(Straggler(r.dim, r.op, r.size_bytes, r.group_index, list(r.ranks), list(r.hosts),
                                 r.busbw_gbps, median, best_iter_gbps=max(mine),
                                 siblings_worst_iter_gbps=min(healthy), false_alarm_p=p, iters=len(mine)))
    return out


def confirm(first: list[Straggler], second: list[ProbeResult], ratio: float,
            calls_per_figure: int = 1) -> list[Straggler]:
    """The stragglers of the first pass that the second pass (the same steps measured again, each of
    its figures the mean of `calls_per_figure` calls) finds again.

    Each kept straggler carries both measurements: busbw and the siblings' median of each pass, and
    how many calls the second timed.
    """
    again = {(s.dim, s.op, s.group_index): s for s in stragglers(second, ratio)}
    kept = []
    for s in first:
        twin = again.get((s.dim, s.op, s.group_index))
        if twin is None:
            continue
        s.confirm_busbw_gbps, s.confirm_siblings_median_gbps = twin.busbw_gbps, twin.siblings_median_gbps
        s.confirm_calls = twin.iters * calls_per_figure
        s.false_alarm_p = s.false_alarm_p * twin.false_alarm_p
        kept.append(s)
    return kept


def cross_dim_suspects(slow: list[Straggler]) -> dict[int, list[str]]:
    """Ranks that sit in slow groups of two or more dimensions: rank -> those dimensions."""
    dims: dict[int, set[str]] = defaultdict(set)
    for s in slow:
        for rank in s.ranks:
            dims[rank].add(s.dim)
    return {rank: sorted(d) for rank, d in sorted(dims.items()) if len(d) >= 2}


class BelowExpected(Struct):
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
