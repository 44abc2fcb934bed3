"""Layout: how ranks sit on hosts. torchrun, DeviceMesh and NCCL assume a regular layout.

LOCAL_RANK must be unique per host (it picks the GPU), every host must run the same number
of ranks (LOCAL_WORLD_SIZE), those must add up to WORLD_SIZE, and a host's ranks should be
contiguous. A LOCAL_RANK at or above LOCAL_WORLD_SIZE is refused earlier, when the rank
resolves its world (one line, exit 2 on that rank; rank 0 then reports it missing).
Each check yields one finding however many hosts are affected, so 4096 ranks stay readable.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence

from preflight.lib.grouping import describe, group_by, minority
from preflight.lib.hostlist import host_ranges, rank_ranges
from preflight.model import RankFacts, Severity
from preflight.registry import CROSS, JobView, Problem, Tags, check


def _by_host(ranks: Sequence[RankFacts]) -> dict[str, list[RankFacts]]:
    hosts: dict[str, list[RankFacts]] = defaultdict(list)
    for facts in sorted(ranks, key=lambda f: f.rank):
        hosts[facts.host].append(facts)
    return dict(sorted(hosts.items()))


@check(
    "LAYOUT001",
    tag=Tags.LAYOUT,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Each process on a host needs its own LOCAL_RANK (it selects the GPU): check the launcher's "
    "per-task variables, and that host names are unique (containers sharing one hostname).",
)
def duplicate_local_rank(job: JobView) -> Iterable[Problem]:
    """LOCAL_RANK must be unique among the ranks of one host.

    Two ranks with the same LOCAL_RANK on one host bind the same GPU: NCCL fails with
    "Duplicate GPU detected" or, worse, both share one device and the job runs at half speed.
    It also happens when different machines report the same host name.
    """
    ranks = job.ranks
    clashes = []
    for host, members in _by_host(ranks).items():
        for local_rank, holders in group_by(members, lambda f: f.world.local_rank).items():
            if len(holders) > 1:
                clashes.append((host, local_rank, holders))
    if not clashes:
        return
    host, local_rank, holders = clashes[0]
    more = f" (and {len(clashes) - 1} more clash(es))" if len(clashes) > 1 else ""
    involved = [f for _, _, group in clashes for f in group]
    yield Problem(
        f"LOCAL_RANK {local_rank} is held by ranks {rank_ranges(f.rank for f in holders)} on {host}{more}",
        ranks=[f.rank for f in involved],
        hosts=[f.host for f in involved],
    )


@check(
    "LAYOUT002",
    tag=Tags.LAYOUT,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Give every node the same number of processes (torchrun --nproc-per-node, srun "
    "--ntasks-per-node); torchrun and DeviceMesh assume homogeneous nodes.",
)
def uneven_local_world_size(job: JobView) -> Iterable[Problem]:
    """LOCAL_WORLD_SIZE must be the same on every host.

    torchrun assumes homogeneous nodes, and a DeviceMesh whose inner dimension is the node size
    puts ranks of one group on two hosts when nodes differ. The finding names the hosts
    outside the most common LOCAL_WORLD_SIZE.
    """
    ranks = job.ranks
    groups = group_by(ranks, lambda f: f.world.local_world_size)
    if len(groups) < 2:
        return
    odd = minority(groups)
    yield Problem(
        f"LOCAL_WORLD_SIZE differs: {describe(groups, ranks, str)}",
        ranks=[f.rank for f in odd],
        hosts=[f.host for f in odd],
    )


@check(
    "LAYOUT003",
    tag=Tags.LAYOUT,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="WORLD_SIZE must equal nodes x processes per node; fix the launcher's node or task "
    "counts (a host ran more or fewer processes than it declared).",
)
def world_size_not_sum(job: JobView) -> Iterable[Problem]:
    """WORLD_SIZE must equal the sum of the hosts' LOCAL_WORLD_SIZE.

    Checked when every rank reported (a missing rank is RANK001's finding). A host that runs
    more or fewer processes than its LOCAL_WORLD_SIZE says means the launcher's counts and
    the real placement disagree: ranks wait for peers that are not there.
    """
    ranks = job.ranks
    if len(ranks) != job.world_size or len({f.world.world_size for f in ranks}) != 1:
        return
    hosts = _by_host(ranks)
    declared = {host: max(f.world.local_world_size for f in members) for host, members in hosts.items()}
    total = sum(declared.values())
    if total == job.world_size:
        return
    odd = {host for host, members in hosts.items() if len(members) != declared[host]}
    named = [f for host in sorted(odd) for f in hosts[host]]
    detail = ", ".join(f"{h}: {declared[h]} declared, {len(hosts[h])} ran" for h in sorted(odd)[:3])
    yield Problem(
        f"WORLD_SIZE is {job.world_size} but the hosts' LOCAL_WORLD_SIZE add up to {total} ({detail})",
        ranks=[f.rank for f in named],
        hosts=sorted(odd),
        data={"world_size": job.world_size, "sum_local_world_size": total},
    )


@check(
    "LAYOUT004",
    tag=Tags.LAYOUT,
    scope=CROSS,
    severity=Severity.WARN,
    hint="Place ranks in blocks (srun --distribution=block, the default; torchrun always does): "
    "mesh dimensions assume consecutive ranks share a host.",
)
def non_contiguous_ranks(job: JobView) -> Iterable[Problem]:
    """A host's ranks should be consecutive numbers.

    DeviceMesh builds its innermost dimension (usually tensor parallel) from consecutive
    ranks, assuming they share a host and its NVLink. With cyclic placement those groups
    cross the network and run an order of magnitude slower, without any error.
    """
    ranks = job.ranks
    # A gap on a host matters only when another host holds a rank inside it: a missing rank
    # (RANK001's finding) leaves a gap no other host fills. O(N log N): one sorted list, bisected.
    present = sorted(f.rank for f in ranks)
    scattered = {
        host: members for host, members in _by_host(ranks).items()
        if bisect.bisect_right(present, members[-1].rank) - bisect.bisect_left(present, members[0].rank)
        != len(members)
    }
    if not scattered:
        return
    host, members = next(iter(scattered.items()))
    yield Problem(
        f"ranks are not contiguous on {len(scattered)} host(s) [{host_ranges(scattered)}], "
        f"e.g. {host} holds ranks {rank_ranges(f.rank for f in members)}",
        ranks=[f.rank for members in scattered.values() for f in members],
        hosts=list(scattered),
    )
