"""The NVLink fabric of 2026: each GPU's fabric health, the NVLink domains ranks share, and IMEX.

Reads the bound GPU's `GpuFabric` (NVML `nvmlDeviceGetGpuFabricInfoV`, preflight/lib/nvml_fabric.py,
gathered by steps/gather/gpu_health.py): a GPU registered with an NVSwitch fabric reports a
cluster UUID and a clique id, and GPUs reporting the same pair share one NVLink domain; on a
GB200/GB300 NVL72 rack that domain spans hosts, and memory is shared across them through the
IMEX daemon, which each process reaches through an IMEX channel device node. The registration
state itself is GPU014 (checks/gpu_health.py); the mesh order against these domains is LAYOUT006
(checks/mesh_order.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from preflight.checks.gpu_agreement import needs_nvml_somewhere
from preflight.checks.gpu_health import bound_gpus, needs_nvml
from preflight.lib.grouping import LastAnswerKept, odd_ones, rank_number
from preflight.lib.nvml_fabric import health_faults
from preflight.model import RankFacts, Severity
from preflight.registry import CROSS, LOCAL, CheckContext, Grade, JobView, Problem, Tags, check

IMEX_CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"


def nvlink_domain(facts: RankFacts) -> str:
    """`<cluster uuid>/<clique>` of the rank's bound GPU once registered with a fabric; "" otherwise."""
    for gpu in facts.health.gpus:
        if gpu.fabric is not None and gpu.fabric.domain:
            return gpu.fabric.domain
    return ""


def _ranks_text(ranks: Sequence[RankFacts]) -> str:
    return ",".join(str(f.rank) for f in ranks[:8]) + (",..." if len(ranks) > 8 else "")


@check("GPU022", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.ERROR, blames_host=True,
       hint="Check the NVLink fabric of this node (`nvidia-smi -q | grep -A12 Fabric`, the fabric manager's and "
       "NVLink switch logs): reseat or replace what lost links, restart the fabric manager; drain the node meanwhile.")
def fabric_unhealthy(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The GPU's NVLink fabric reports a fault in its health mask: degraded bandwidth, fabric manager down,
    too few NVLinks, no partition, an unhealthy route, or another incorrect configuration.

    NVML's fabric health mask (driver 550 and later) says what the fabric manager knows about
    this GPU's NVLink fabric; a GPU whose fabric lost links still completes its registration and
    runs every collective at a fraction of its bandwidth. A route or access-timeout recovery in
    progress is read again for a short grace before it counts.
    """
    for gpu in bound_gpus(facts):
        if gpu.fabric is None:
            continue
        faults = health_faults(gpu.fabric)
        if faults:
            bus = f" ({gpu.pci_bus_id})" if gpu.pci_bus_id else ""
            yield Problem(f"GPU {gpu.index}{bus} of rank {facts.rank} on {facts.host}: NVLink fabric reports "
                          f"{', '.join(faults)}", ranks=[facts.rank], hosts=[facts.host],
                          data={"gpu_index": gpu.index, "pci_bus_id": gpu.pci_bus_id, "faults": faults,
                                "health_mask": gpu.fabric.health_mask, "health_summary": gpu.fabric.health_summary})


@LastAnswerKept
def _in_domains(ranks: Sequence[RankFacts]) -> list[tuple[RankFacts, str]]:
    """The ranks whose bound GPU registered with an NVLink domain, in rank order, each with its domain (kept:
    GPU034 and GPU035 ask about one job's ranks; 131,072 of them on NVL72 racks read it in 0.3 s each)."""
    found = []
    names: dict[str, str] = {}  # each domain's name once: the list is kept, and a rack's 72 ranks name one
    for facts in sorted(ranks, key=rank_number):
        domain = nvlink_domain(facts)
        if domain:
            found.append((facts, names.setdefault(domain, domain)))
    return found


@check("GPU034", tag=Tags.GPU, scope=CROSS, applies=needs_nvml_somewhere, severity=Severity.ERROR, blames_host=True,
       grades=(Grade(Severity.WARN, "hosts of one NVLink cluster registered in different cliques"),),
       hint="Drain the named host and restart its fabric manager (and IMEX), then check the partition "
       "configuration; a GPU in another domain than its siblings talks to them over the network, not NVLink.")
def nvlink_domain_split(job: JobView) -> Iterable[Problem]:
    """Ranks that should share an NVLink domain report different cluster UUIDs or cliques.

    The GPUs of one host always share a domain: one that reports another cluster UUID or clique
    than its siblings is misregistered (error). Hosts that report one cluster UUID are in one
    NVLink rack: those split over different cliques (partitions) reach each other over the
    network only (warn): the job was placed across partitions, or a host's partition is wrong.
    """
    in_domains = _in_domains(job.ranks)
    by_host: dict[str, dict[int, str]] = defaultdict(dict)
    for facts, domain in in_domains:
        by_host[facts.host][facts.rank] = domain
    for host, domains in sorted(by_host.items()):
        if len(set(domains.values())) < 2:
            continue
        majority, odd = odd_ones(domains)
        yield Problem(f"{host}: the GPUs of rank(s) {','.join(map(str, sorted(odd)))} are in NVLink domain(s) "
                      f"{', '.join(sorted(set(odd.values())))}; their siblings on the host are in {majority}",
                      ranks=sorted(odd), hosts=[host],
                      data={"majority": majority, "odd": {str(r): d for r, d in odd.items()}})
    clusters: dict[str, dict[str, int]] = defaultdict(dict)  # cluster -> host -> clique (the host's majority)
    for host, domains in by_host.items():
        cluster, _, clique = odd_ones(domains)[0].rpartition("/")
        clusters[cluster][host] = int(clique)
    for cluster, cliques in sorted(clusters.items()):
        if len(set(cliques.values())) < 2:
            continue
        majority, odd = odd_ones(cliques)
        hosts = sorted(odd)
        yield Problem(f"NVLink cluster {cluster}: {', '.join(f'{h} is in clique {odd[h]}' for h in hosts[:8])}; "
                      f"the job's other hosts of the cluster are in clique {majority}: they reach each other over "
                      "the network, not NVLink", hosts=hosts, severity=Severity.WARN,
                      ranks=[f.rank for f, _ in in_domains if f.host in odd],
                      data={"cluster_uuid": cluster, "majority_clique": majority, "cliques": odd})


@check("GPU035", tag=Tags.GPU, scope=CROSS, applies=needs_nvml_somewhere, severity=Severity.ERROR, blames_host=True,
       hint="Run the IMEX daemon (nvidia-imex) on every host of the NVLink domain and create channel 0 "
       "(`nvidia-modprobe -i 0:1`, or the driver option NVreg_CreateImexChannel0=1); in a container pass it in "
       "(NVIDIA_IMEX_CHANNELS=0, or the device node). Drain the host until it has one.")
def imex_channel_missing(job: JobView) -> Iterable[Problem]:
    """A host of a multi-node NVLink domain has no IMEX channel (/dev/nvidia-caps-imex-channels/channel0).

    Where the job's hosts share one NVLink domain (a GB200/GB300 NVL72 rack), GPU memory is
    shared across hosts through IMEX: a process without a channel cannot import another host's
    memory, and NCCL's multi-node NVLink transport fails or falls back to the network.
    """
    hosts_of: dict[str, set[str]] = defaultdict(set)
    first: dict[str, RankFacts] = {}
    for facts, domain in _in_domains(job.ranks):
        hosts_of[domain].add(facts.host)
        first.setdefault(facts.host, facts)
    ranks_of: dict[str, list[int]] = {}  # every host's ranks: read only when a host has no channel
    for domain, hosts in sorted(hosts_of.items()):
        if len(hosts) < 2:
            continue
        for host in sorted(hosts):
            facts = first[host]
            if facts.health.imex_channels == []:
                if not ranks_of:
                    for each in job.ranks:
                        ranks_of.setdefault(each.host, []).append(each.rank)
                yield Problem(f"{host} is in the multi-node NVLink domain {domain} with {len(hosts) - 1} other "
                              f"host(s) of the job but has no IMEX channel ({IMEX_CHANNEL})",
                              ranks=sorted(ranks_of[host]), hosts=[host],
                              data={"domain": domain, "hosts_in_domain": len(hosts)})
