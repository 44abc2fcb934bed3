"""Layout: how ranks sit on hosts. torchrun, DeviceMesh and NCCL assume a regular layout.

LOCAL_RANK must be unique per host (it picks the GPU), every host must run the same number
of ranks (LOCAL_WORLD_SIZE), those must add up to WORLD_SIZE, and a host's ranks should be
contiguous. A node is a host and, where the launcher names one, a node rank: two torchrun
agents on one machine are two nodes, and a host name shared by several nodes is a warning
(LAYOUT005), not a clash of LOCAL_RANKs. A LOCAL_RANK at or above LOCAL_WORLD_SIZE is refused earlier, when the rank
resolves its world (one line, exit 2 on that rank; rank 0 then reports it missing).
Each check yields one finding however many hosts are affected, so 4096 ranks stay readable.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from preflight.lib.grouping import by_node, describe, group_by, minority, node_label, shared_host_names
from preflight.lib.hostlist import host_ranges, rank_ranges
from preflight.model import Severity
from preflight.registry import CROSS, JobView, Problem, Tags, check


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
    for node, members in by_node(ranks).items():
        if len({f.world.local_rank for f in members}) == len(members):
            continue  # each its own (every healthy node): no grouping
        for local_rank, holders in group_by(members, lambda f: f.world.local_rank).items():
            if len(holders) > 1:
                clashes.append((node_label(node), local_rank, holders))
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
    nodes = by_node(ranks)
    declared = {node: max(f.world.local_world_size for f in members) for node, members in nodes.items()}
    total = sum(declared.values())
    if total == job.world_size:
        return
    odd = sorted(node for node, members in nodes.items() if len(members) != declared[node])
    named = [f for node in odd for f in nodes[node]]
    detail = ", ".join(f"{node_label(n)}: {declared[n]} declared, {len(nodes[n])} ran" for n in odd[:3])
    yield Problem(
        f"WORLD_SIZE is {job.world_size} but the hosts' LOCAL_WORLD_SIZE add up to {total} ({detail})",
        ranks=[f.rank for f in named],
        hosts=sorted({host for host, _ in odd}),
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
        node: members for node, members in by_node(ranks).items()
        if bisect.bisect_right(present, members[-1].rank) - bisect.bisect_left(present, members[0].rank)
        != len(members)
    }
    if not scattered:
        return
    node, members = next(iter(scattered.items()))
    hosts = sorted({host for host, _ in scattered})
    yield Problem(
        f"ranks are not contiguous on {len(scattered)} host(s) [{host_ranges(hosts)}], "
        f"e.g. {node_label(node)} holds ranks {rank_ranges(f.rank for f in members)}",
        ranks=[f.rank for members in scattered.values() for f in members],
        hosts=hosts,
    )


@check(
    "LAYOUT005",
    tag=Tags.LAYOUT,
    scope=CROSS,
    severity=Severity.WARN,
    hint="Give every node its own host name (containers: set the pod/container hostname; torchrun "
    "agents on one machine for a trial are fine). Until then the per-host checks see one host, the "
    "exclude list's name excludes every node that uses it, and NCCL tells hosts apart by host name "
    "and boot id: containers of one machine that share a name look like one host to it.",
)
def shared_host_name(job: JobView) -> Iterable[Problem]:
    """Several nodes report the same host name.

    The launcher names the nodes (GROUP_RANK, SLURM_NODEID, PET_NODE_RANK differ) but their
    host names are equal: two torchrun agents on one machine (a common trial of a multi-node
    launch), or containers started with one hostname. preflight keeps them apart by node rank,
    so this is no layout error; but everything keyed by host name sees them as one host: the
    reachability step probes the name once, the per-host interface and port checks read one
    node's facts, `--exclude-file` cannot name one of them alone, and NCCL's host detection
    (host name + boot id, NCCL_HOSTID overrides it) merges containers of one machine.
    """
    shared = shared_host_names(job.ranks)
    if not shared:
        return
    host, nodes = next(iter(shared.items()))
    # Ranks with one loopback scope (boot id + network namespace) share a machine's network.
    scopes = {f.network.loopback_scope for f in job.ranks if f.host == host}
    where = ""
    if "" not in scopes:
        where = " on one machine" if len(scopes) == 1 else " on different machines or network namespaces"
    more = f" (and {len(shared) - 1} more shared host name(s))" if len(shared) > 1 else ""
    involved = sorted(f.rank for f in job.ranks if f.host in shared)
    yield Problem(
        f"{len(nodes)} nodes (node ranks {rank_ranges(node for _, node in nodes)}) share the host name "
        f"{host}{where}{more}: per-host checks and the exclude list see them as one host",
        ranks=involved,
        hosts=sorted(shared),
        data={"shared": {h: [node for _, node in keys] for h, keys in shared.items()}},
    )
