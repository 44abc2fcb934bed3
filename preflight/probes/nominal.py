"""The nominal rate of the link a probe group runs over, so each figure reads as a fraction.

A group inside one host whose GPUs all have active NVLinks runs over NVLink: its nominal
rate is the GPU's NVLink bandwidth (active links x per-link rate of that NVLink generation,
one direction, as nccl-tests' busbw is compared against); a rank's GPU is found by PCI bus
id or UUID, never by LOCAL_RANK. A group that spans hosts runs, on NCCL, over the RDMA ports
NCCL would use (ACTIVE, NCCL_IB_HCA), one NIC per rank; on gloo (or without RDMA ports) over
each rank's chosen interface: the InfiniBand/RoCE port behind it or the interface's speed.
The slowest rank's link bounds the group.
Anything else (shared memory, loopback, an unknown speed) has no nominal rate: no fraction
is shown rather than a made-up one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import Struct

from preflight.lib.ib_hca import HcaFilter
from preflight.model import GpuFacts, IbPort, ProbeResult, RankFacts
from preflight.probes.device.hardware import NVLINK_GBPS_PER_LINK  # the one hardware table


class Link(Struct, frozen=True):
    """A nominal rate in GB/s (1e9 B/s) and where it was read."""

    gbps: float
    source: str


def _norm_bus(bus_id: str) -> str:
    """NVML's 8-digit domain and torch's 4-digit one compare equal; case-insensitive."""
    text = bus_id.strip().lower()
    domain, _, rest = text.partition(":")
    return f"{int(domain, 16):08x}:{rest}" if rest and all(c in "0123456789abcdef" for c in domain) else text


def device_of(facts: RankFacts, device_id: str) -> GpuFacts | None:
    """The rank's GPU among its host's NVML devices, by PCI bus id or UUID (NVML indices are not CUDA ordinals).

    Without an id, only a host whose NVML shows exactly one GPU has an unambiguous device.
    """
    if device_id:
        for gpu in facts.gpus:
            if device_id in (gpu.uuid,) or (gpu.pci_bus_id and _norm_bus(gpu.pci_bus_id) == _norm_bus(device_id)):
                return gpu
        return None
    return facts.gpus[0] if len(facts.gpus) == 1 else None


def nvlink_of(facts: RankFacts, device_id: str = "") -> Link | None:
    """The NVLink bandwidth of the rank's GPU (matched by bus id or UUID), where it has active links."""
    gpu = device_of(facts, device_id)
    if gpu is None:
        return None
    links, generation = gpu.nvlink_active, gpu.nvlink_version
    per_link = NVLINK_GBPS_PER_LINK.get(generation)
    if links <= 0 or per_link is None:
        return None
    return Link(links * per_link, f"NVLink{generation} x{links}")


def nccl_ports(facts: RankFacts) -> list[IbPort]:
    """The RDMA ports NCCL would use here: ACTIVE, filtered by NCCL_IB_HCA; none with NCCL_IB_DISABLE=1."""
    if facts.env.get("NCCL_IB_DISABLE", "").strip() == "1":
        return []
    active = [p for p in facts.network.ib_ports if p.state.upper().endswith("ACTIVE") and p.rate_gbps]
    hca = HcaFilter.parse(facts.env.get("NCCL_IB_HCA"))
    return active if hca is None else [p for p in active if hca.allows(p.device, p.port)]


def network_link_of(facts: RankFacts, backend: str = "") -> Link | None:
    """The rate of the rank's link to other hosts.

    NCCL (backend "nccl"): the RDMA ports NCCL would use (nccl_ports), per NIC: each rank's
    traffic crosses one NIC (NCCL picks the one nearest its GPU), so the figure is the fastest
    usable port's rate, with the number of usable ports in the source. Without usable RDMA
    ports, and on gloo, the socket path: the chosen interface's IB/RoCE port or Ethernet speed.
    """
    if backend == "nccl":
        ports = nccl_ports(facts)
        if ports:
            best = max(ports, key=lambda p: p.rate_gbps or 0.0)
            return Link((best.rate_gbps or 0.0) / 8,
                        f"{best.device} port {best.port} {best.rate} (per NIC; {len(ports)} usable)")
    chosen = facts.network.chosen_interface
    name = chosen.name if chosen else ""
    if not name:
        return None
    for port in facts.network.ib_ports:
        if name in port.netdevs and port.rate_gbps:
            return Link(port.rate_gbps / 8, f"{port.device} port {port.port} {port.rate}")
    for interface in facts.network.interfaces or []:
        if interface.name == name and interface.speed_mbps:
            return Link(interface.speed_mbps / 8000, f"{name} {interface.speed_mbps} Mb/s")
    return None


def group_link(ranks: Sequence[int], facts_by_rank: Mapping[int, RankFacts],
               devices: Mapping[int, str] | None = None, backend: str = "") -> Link | None:
    """The nominal link of a group: NVLink inside one host, the slowest network link across hosts.

    devices: rank -> the PCI bus id or UUID of its bound GPU (collect.Gathered.devices()).
    """
    members = [facts_by_rank[r] for r in ranks if r in facts_by_rank]
    if len(members) != len(ranks) or len(members) < 2:
        return None
    if len({f.host for f in members}) == 1:
        links = [nvlink_of(f, (devices or {}).get(f.rank, "")) for f in members]
    else:
        links = [network_link_of(f, backend) for f in members]
    if any(link is None for link in links):
        return None
    return min((link for link in links if link is not None), key=lambda link: link.gbps)


def annotate(results: list[ProbeResult], facts: Sequence[RankFacts], devices: Mapping[int, str] | None = None,
             backend: str = "") -> None:
    """Set nominal_gbps / nominal_source on every result whose link rate is readable."""
    by_rank: dict[int, Any] = {f.rank: f for f in facts}
    cache: dict[tuple[int, ...], Link | None] = {}
    for result in results:
        key = tuple(result.ranks)
        if key not in cache:
            cache[key] = group_link(result.ranks, by_rank, devices, backend)
        link = cache[key]
        if link is not None:
            result.nominal_gbps, result.nominal_source = round(link.gbps, 3), link.source
