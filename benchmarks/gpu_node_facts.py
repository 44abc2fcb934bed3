"""A rank's health and placement sections as a rank on an 8-GPU HGX node gives them (rank0_scale.py --gpu-node).

The synthetic ranks of rank0_scale.py leave these sections empty (as a CPU/gloo rank has them), so every
rank sends the same bytes and rank 0 holds one of each. On a GPU node they are each rank's own: its bound
GPU's NVML reads, its CPU affinity and NUMA layout, its clock offset where it measured one, its host's
build fingerprint on local rank 0. The values are modelled on an H100 SXM node (NVML's fields as the
health gatherer reads them, sysfs's counters and NUMA nodes); what matters to rank 0 is their size and
that they differ per rank, as they do on hardware.
"""

from __future__ import annotations

from preflight.model import GpuFabric, GpuHealth, HealthFacts, IbCounters
from preflight.model.placement_facts import (
    AffinityFacts,
    BuildFacts,
    ClockFacts,
    DistBuild,
    NicPlacement,
    PlacementFacts,
)
from preflight.steps.gather.nic_health import ERROR_COUNTERS

PER_HOST = 8
CPUS = 192  # two sockets of 96 threads
_NUMA = {0: list(range(CPUS // 2)), 1: list(range(CPUS // 2, CPUS))}


def _bus(local: int) -> str:
    return f"00000000:{0x18 + local * 0x10:02X}:00.0"


def rank_health(node: int, local: int) -> HealthFacts:
    """The health section of local rank `local` on host `node`: its bound GPU, the host's NCCL ports and
    their error counters (per host, as read at facts time)."""
    gpu = GpuHealth(
        index=local, pci_bus_id=_bus(local), ecc_uncorrected_volatile=0, ecc_corrected_volatile=node % 3,
        ecc_enabled=True, ecc_pending=False, remap_pending=False, remap_failure=False,
        retired_pages_pending=False, recovery_action=0, clock_event_reasons=1, pcie_width=16,
        pcie_max_width=16, pcie_gen=5, pcie_max_gen=5, nvlinks_read=18,
        fabric=GpuFabric(state=3, cluster_uuid=f"{node // 9:08x}-0000-4000-8000-000000000000", clique_id=1,
                         health_mask=0, health_summary=1),
        persistence_mode=True, compute_mode=0, mig_enabled=False, processes=[],
        memory_used_bytes=(600 + local) << 20, temperature_c=33 + (node + local) % 9, slowdown_c=87,
        power_limit_mw=700_000, power_default_mw=700_000, vbios="96.00.89.00.01")
    counters = [IbCounters(f"mlx5_{i}", 1, {name: (node * 7 + i) % 5 if name == "symbol_error" else 0
                                            for name in ERROR_COUNTERS}) for i in range(PER_HOST)]
    return HealthFacts(nvml="ok", nvidia_device_nodes=True, bound_index=local, bound_reason="LOCAL_RANK",
                       visible_gpus=PER_HOST, gpus=[gpu], xid_watch="watching",
                       nccl_ports=[f"mlx5_{i}/1" for i in range(PER_HOST)], nccl_ports_source="every active port",
                       ib_counters=counters, peermem=True, imex_channels=["channel0"])


def rank_placement(node: int, local: int) -> PlacementFacts:
    """The placement section of local rank `local` on host `node`: its CPUs and its GPU's and NICs' place in
    the PCIe tree; its host's clock offset and build fingerprint on local rank 0 (the one that takes them)."""
    per_rank = CPUS // PER_HOST
    numa = local // (PER_HOST // 2)
    switch = [f"0000:{0x10 + local // 2 * 0x20:02x}:00.0", f"0000:{0x11 + local // 2 * 0x20:02x}:00.0"]
    affinity = AffinityFacts(
        cpus=list(range(local * per_rank, (local + 1) * per_rank)), gpu_bus_id=_bus(local), gpu_numa_node=numa,
        gpu_pci_path=[*switch, _bus(local)[4:]], numa_cpus=_NUMA,
        nics=[NicPlacement(name=f"mlx5_{local}", numa_node=numa, chosen_by="every RDMA port",
                           pci_path=[*switch, f"0000:{0x19 + local * 0x10:02x}:00.0"])],
        local_nics=[f"mlx5_{local}"])
    clock = ClockFacts(threshold_s=0.05, daemon="chronyd", synchronised=True)
    build = BuildFacts()
    if local == 0:
        clock.offset_s, clock.error_s, clock.samples = (node % 41 - 20) * 1e-5, 4e-5, 8
        build = BuildFacts(taken=True, container="apptainer:/shared/images/train-2026.11.sif", dists=[
            DistBuild(name=f"package-{i:02d}", version=f"{i}.0.0", digest=f"{i * 7919:012x}", count=40 + i,
                      location="/opt/venv/lib/python3.11/site-packages") for i in range(60)])
    return PlacementFacts(build=build, clock=clock, affinity=affinity)


def main() -> None:
    """What one rank's health and placement weigh on the wire, and how much of it is its host's."""
    from preflight.model.codec import encode
    from preflight.model.host_parts import split_health, split_placement

    for local in (0, 1):
        health, placement = rank_health(0, local), rank_placement(0, local)
        own_health, counters = split_health(health)
        own_placement, numa_cpus, build = split_placement(placement)
        print(f"local rank {local}: health {len(encode(health))} bytes ({len(encode(own_health))} its own, "
              f"{len(encode(counters))} its host's ports' counters); placement {len(encode(placement))} bytes "
              f"({len(encode(own_placement))} its own, {len(encode(numa_cpus))} NUMA CPUs, "
              f"{len(encode(build))} build fingerprint)")


if __name__ == "__main__":
    main()
