"""GPU checks across ranks: binding on each host, NVLink siblings, and the GPU kind across hosts.

Cross checks over every rank's `facts.health` (its bound GPU) and `facts.gpus` (every GPU its
host's NVML sees, preflight/steps/gather/gpus.py). Per-GPU health is checks/gpu_health.py. The
driver and CUDA driver versions are compared by SW001 (checks/software.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from preflight.checks.gpu_health import NO_DRIVER
from preflight.lib.grouping import LastAnswerKept, odd_ones, rank_number
from preflight.model import GpuFacts, RankFacts, Severity
from preflight.registry import CROSS, JobView, Problem, Tags, check


@LastAnswerKept
def _hosts(ranks: Sequence[RankFacts]) -> dict[str, list[RankFacts]]:
    """Ranks with a readable NVML, by host (lowest rank first; read-only, kept: four checks ask it of one job)."""
    by_host: dict[str, list[RankFacts]] = defaultdict(list)
    for facts in sorted(ranks, key=rank_number):
        if facts.health.nvml == "ok":
            by_host[facts.host].append(facts)
    return dict(by_host)


def needs_nvml_somewhere(job: JobView) -> str | None:
    """These cross checks compare what NVML read: skipped when no rank could read it."""
    return None if _nvml_somewhere(job.ranks) else NO_DRIVER


@LastAnswerKept
def _nvml_somewhere(ranks: Sequence[RankFacts]) -> bool:
    """Whether any rank read NVML (kept: four checks ask it of the job's ranks, a pass each)."""
    return any(facts.health.nvml == "ok" for facts in ranks)


def _bound_gpu(facts: RankFacts) -> GpuFacts | None:
    """The host's GpuFacts of the GPU this rank is bound to."""
    index = facts.health.bound_index
    return next((g for g in facts.gpus if g.index == index), None) if index is not None else None


def _bound_key(facts: RankFacts) -> str:
    """The bound GPU's PCI bus id (NVML indices are per host, bus ids name the device)."""
    for gpu in facts.health.gpus:
        if gpu.pci_bus_id:
            return gpu.pci_bus_id
    return f"index {facts.health.bound_index}"


def _distinct_nccl_host_ids(holders: list[RankFacts]) -> bool:
    """Every rank sharing the GPU has its own NCCL_HOSTID (NCCL then sees them as separate hosts)."""
    ids = [f.env.get("NCCL_HOSTID", "") for f in holders]
    return all(ids) and len(set(ids)) == len(ids)


@check("GPU030", tag=Tags.GPU, scope=CROSS, applies=needs_nvml_somewhere, severity=Severity.ERROR,
       hint="Give every local rank its own GPU: as many GPUs per node as tasks (srun --gpus-per-task=1, "
       "or all of the node's GPUs visible to each rank), never two ranks on one GPU.")
def gpu_binding(job: JobView) -> Iterable[Problem]:
    """A host has fewer usable GPUs than local ranks, or two of its ranks are bound to one GPU.

    Ranks sharing a GPU split its memory and SMs (and NCCL refuses two ranks on one device);
    a rank with no GPU to bind fails at its first CUDA call. Exclusive-process compute mode
    makes sharing fail outright. Ranks that share a GPU under distinct NCCL_HOSTID values are
    left alone, since that is how several ranks are put on one GPU on purpose and NCCL accepts it.
    """
    for host, ranks in sorted(_hosts(job.ranks).items()):
        unbound = [f for f in ranks if f.health.bound_index is None]
        if unbound:
            visible = unbound[0].health.visible_gpus
            yield Problem(f"{host}: {len(unbound)} of {len(ranks)} local rank(s) have no GPU to use "
                          f"({visible} visible; {unbound[0].health.bound_reason})",
                          ranks=[f.rank for f in unbound], hosts=[host],
                          data={"visible_gpus": visible, "local_ranks": len(ranks)})
        shared: dict[str, list[RankFacts]] = defaultdict(list)
        for facts in ranks:
            if facts.health.bound_index is not None:
                shared[_bound_key(facts)].append(facts)
        for bus, holders in sorted(shared.items()):
            if len(holders) < 2:
                continue
            exclusive = any(g.compute_mode == 3 for f in holders for g in f.health.gpus)
            if not exclusive and _distinct_nccl_host_ids(holders):
                continue  # deliberate: NCCL treats each as its own host and accepts the sharing
            yield Problem(f"{host}: ranks {', '.join(str(f.rank) for f in holders)} are bound to one GPU ({bus})"
                          + (" in exclusive-process compute mode: all but one will fail" if exclusive else ""),
                          ranks=[f.rank for f in holders], hosts=[host], data={"pci_bus_id": bus})


@check("GPU031", tag=Tags.GPU, scope=CROSS, applies=needs_nvml_somewhere, severity=Severity.ERROR, blames_host=True,
       hint="Reseat the GPU or the NVLink bridge / baseboard connection, or RMA it; until then drain the node: "
       "NVLink traffic through this GPU runs on fewer links.")
def nvlink_fewer_than_siblings(job: JobView) -> Iterable[Problem]:
    """A GPU a rank will use has fewer active NVLinks than the other GPUs of its host."""
    for host, ranks in sorted(_hosts(job.ranks).items()):
        counts = {g.index: g.nvlink_active for g in ranks[0].gpus if not g.error}
        if len(counts) < 2 or max(counts.values()) == 0:
            continue
        majority, odd = odd_ones(counts)
        if not odd:  # every GPU of the host has its siblings' links (almost every host): no rank to read
            continue
        for facts in ranks:
            gpu = _bound_gpu(facts)
            if gpu is not None and gpu.index in odd and odd[gpu.index] < majority:
                yield Problem(f"GPU {gpu.index} ({gpu.pci_bus_id}) of rank {facts.rank} on {host} has "
                              f"{odd[gpu.index]} active NVLinks; its siblings have {majority}",
                              ranks=[facts.rank], hosts=[host],
                              data={"gpu_index": gpu.index, "active": odd[gpu.index], "siblings": majority})


def _kind(facts: RankFacts) -> tuple[str, str]:
    """(GPU name, topology class) of the GPU a rank is bound to; "" where unknown.

    The topology is unknown when NVML did not give the bound GPU's NVLink or fabric state."""
    gpu = _bound_gpu(facts)
    if gpu is None or gpu.error:
        return "", ""
    health = facts.health.gpus[0] if facts.health.gpus else None
    if health is None or {"nvlink_version", "nvlink_errors", "fabric_info"} & set(health.unavailable):
        return gpu.name, ""
    links = max((g.nvlink_active for g in facts.gpus), default=0)
    topology = f"NVLink {gpu.nvlink_version}.x, {links} links" if links else "no NVLink"
    return gpu.name, topology + (", NVSwitch" if health.fabric and health.fabric.state else "")


@check("GPU032", tag=Tags.GPU, scope=CROSS, applies=needs_nvml_somewhere, severity=Severity.ERROR,
       hint="Run the job on one kind of node (a Slurm constraint / node feature); exclude the odd hosts.")
def gpu_kind_differs(job: JobView) -> Iterable[Problem]:
    """The GPU model or the NVLink / NVSwitch topology class differs across hosts.

    Collectives run at the pace of the slowest node, and NCCL picks algorithms per topology;
    a mixed job is usually a scheduling mistake. Hosts where NVML did not give the topology
    are compared by GPU model only.
    """
    kinds = {host: _kind(ranks[0]) for host, ranks in _hosts(job.ranks).items()}
    for part, what in ((0, "GPU"), (1, "GPU topology")):
        values = {host: kind[part] for host, kind in kinds.items() if kind[part]}
        if len(values) < 2:
            continue
        majority, odd = odd_ones(values)
        for host, value in sorted(odd.items()):
            yield Problem(f"{what} on {host} is {value}; most hosts have {majority}", hosts=[host],
                          data={"what": what, "value": value, "majority": majority})


@check("GPU033", tag=Tags.GPU, scope=CROSS, applies=needs_nvml_somewhere, severity=Severity.WARN,
       hint="Flash the same VBIOS on every node (the vendor's firmware bundle) at the next maintenance.")
def vbios_differs(job: JobView) -> Iterable[Problem]:
    """The VBIOS version of the GPUs differs across hosts (firmware drift).

    Firmware fixes change clocks, power management and error handling; a job spread over
    mixed firmware can behave differently per node.
    """
    versions = {host: next((g.vbios for f in ranks for g in f.health.gpus if g.vbios), "")
                for host, ranks in _hosts(job.ranks).items()}
    versions = {host: v for host, v in versions.items() if v}
    if len(versions) < 2:
        return
    majority, odd = odd_ones(versions)
    for host, version in sorted(odd.items()):
        yield Problem(f"VBIOS on {host} is {version}; most hosts have {majority}", hosts=[host],
                      data={"vbios": version, "majority": majority})
