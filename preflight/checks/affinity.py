"""Where a rank's threads and traffic run against where its GPU sits (AFF001-AFF003).

Reads `facts.placement.affinity` (preflight/steps/gather/affinity.py): the rank's allowed CPUs,
its GPU's NUMA node and PCIe path, the NICs NCCL would use and those local to the GPU.
"""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.cpulist import cpulist
from preflight.lib.grouping import by_node, node_label
from preflight.model import RankFacts, Severity
from preflight.registry import CROSS, LOCAL, CheckContext, JobView, Problem, Tags, check


def _no_gpu_place(facts: RankFacts, ctx: CheckContext) -> str | None:
    aff = facts.placement.affinity
    if not aff.gpu_bus_id:
        return "no GPU bound to this rank"
    if aff.gpu_numa_node is None:
        return f"GPU {aff.gpu_bus_id}'s NUMA node is unknown (sysfs)"
    return None


@check(
    "AFF001",
    tag=Tags.LAYOUT,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Bind each rank to its GPU's NUMA node: `srun --cpu-bind=socket` (or map_cpu/mask_cpu from the "
    "GPU's cpulist), torchrun's `--numa-binding=node` (where this torch has it: the message says), or `numactl "
    "--cpunodebind=N --membind=N` around the training command.",
    applies=_no_gpu_place,
)
def cpus_off_gpu_node(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """Every CPU this rank may run on is on another NUMA node than its GPU.

    Host-side work (the data loader, kernel launches, NCCL's proxy thread, pinned copies) then
    crosses the socket interconnect: 20-40% slower, and pinned memory lands on the far node. The
    rank's allowed CPUs are sched_getaffinity's (taskset, srun --cpu-bind, numactl, a container's
    cpuset); the GPU's node is its PCI device's numa_node in sysfs.
    """
    aff = facts.placement.affinity
    node = aff.gpu_numa_node
    near = aff.numa_cpus.get(node, []) if node is not None else []
    if not aff.cpus or not near or set(aff.cpus) & set(near):
        return
    numa = "this torch's torchrun has --numa-binding" if aff.torchrun_numa_binding else \
        "this torch's torchrun has no --numa-binding"
    yield Problem(
        f"rank {facts.rank}'s CPUs {cpulist(aff.cpus)} are all off its GPU's NUMA node {node} "
        f"(GPU {aff.gpu_bus_id}; node {node}'s CPUs {cpulist(near)}; {numa})",
        ranks=[facts.rank], hosts=[facts.host],
        data={"cpus": cpulist(aff.cpus), "gpu_cpus": cpulist(near), "gpu_numa_node": node,
              "gpu_bus_id": aff.gpu_bus_id},
    )


@check(
    "AFF002",
    tag=Tags.LAYOUT,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Let NCCL use the NIC beside the GPU: leave NCCL_IB_HCA unset (NCCL picks the nearest), or list the "
    "local devices per rank (a per-rank NCCL_IB_HCA from the GPU-to-NIC map, e.g. NCCL_TOPO_FILE).",
    applies=_no_gpu_place,
)
def nics_off_gpu(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The NICs NCCL may use all sit off the GPU's PCIe switch and NUMA node, while a local one exists.

    GPUDirect RDMA through a NIC behind another switch (or on the other socket) crosses the
    root complex or the socket link: lower bandwidth, higher latency, and traffic that competes
    with the other GPUs'. Which NICs NCCL may use: NCCL_IB_HCA (every RDMA port when unset), else
    NCCL_SOCKET_IFNAME's interface.
    """
    aff = facts.placement.affinity
    if not aff.nics or not aff.local_nics:
        return
    if any(nic.name in aff.local_nics for nic in aff.nics):
        return
    chosen = ", ".join(f"{nic.name} (NUMA {nic.numa_node if nic.numa_node is not None else '?'})" for nic in aff.nics)
    yield Problem(
        f"rank {facts.rank}'s GPU {aff.gpu_bus_id} (NUMA {aff.gpu_numa_node}) would send through {chosen}, "
        f"chosen by {aff.nics[0].chosen_by}; local to it: {', '.join(aff.local_nics)}",
        ranks=[facts.rank], hosts=[facts.host],
        data={"nics": [nic.name for nic in aff.nics], "local_nics": list(aff.local_nics),
              "gpu_bus_id": aff.gpu_bus_id},
    )


@check(
    "AFF003",
    tag=Tags.LAYOUT,
    scope=CROSS,
    severity=Severity.WARN,
    hint="Give each rank its own CPUs, or the same set to all ranks of a NUMA node: srun --cpu-bind=cores / "
    "sockets, torchrun --numa-binding, or one taskset/numactl per local rank from one map.",
)
def cpu_sets_overlap(job: JobView) -> Iterable[Problem]:
    """Ranks of one node whose allowed CPUs overlap without being the same set.

    Equal sets are deliberate (unbound ranks, or every rank of a NUMA node bound to that node);
    disjoint sets are a per-rank binding. Sets that partly overlap are a binding that went
    wrong (a map that repeats a core, one rank left unbound among bound ones): those ranks
    compete for the shared CPUs while others idle.
    """
    made: dict[int, frozenset[int]] = {}  # by the CPU list's id: ranks that sent one placement share its list
    for key, ranks in by_node(job.ranks).items():
        sets = []
        for f in ranks:
            cpus = f.placement.affinity.cpus
            if cpus:
                found = made.get(id(cpus))
                if found is None:
                    found = made[id(cpus)] = frozenset(cpus)
                sets.append((f, found))
        distinct = {cpus for _, cpus in sets}
        if len(distinct) < 2 or sum(map(len, distinct)) == len(frozenset().union(*distinct)):
            continue  # one set for all, or sets that share no CPU (almost every node): no pair to look at
        pairs = [(a, b) for i, (a, sa) in enumerate(sets) for b, sb in sets[i + 1:] if sa & sb and sa != sb]
        if not pairs:
            continue
        named = sorted({f.rank for pair in pairs for f in pair})
        shown = "; ".join(f"rank {a.rank} {cpulist(a.placement.affinity.cpus)} and rank {b.rank} "
                          f"{cpulist(b.placement.affinity.cpus)}" for a, b in pairs[:4])
        yield Problem(f"on {node_label(key)}, CPU sets overlap: {shown}" + (" ..." if len(pairs) > 4 else ""),
                      ranks=named, hosts=[key[0]],
                      data={"cpus": {str(f.rank): cpulist(f.placement.affinity.cpus) for f, _ in sets
                                     if f.rank in named}})
