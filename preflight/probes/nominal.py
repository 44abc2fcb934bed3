"""The nominal rate of the link a probe group runs over, so each figure reads as a fraction.

A group inside one host whose GPUs all have active NVLinks runs over NVLink: its nominal
rate is the GPU's NVLink bandwidth (active links x per-link rate of that NVLink version,
one direction, as nccl-tests' busbw is compared against). A group that spans hosts runs
over each rank's chosen interface: the InfiniBand/RoCE port behind it (sysfs rate) or, for
plain Ethernet, the interface's speed (psutil). The slowest rank's link bounds the group.
Anything else (shared memory, loopback, an unknown speed) has no nominal rate: no fraction
is shown rather than a made-up one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from preflight.model import ProbeResult, RankFacts

# GB/s per NVLink, one direction, by NVLink version (NVLink 3 and 4: 25 GB/s; 5: 50 GB/s).
NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}


@dataclass(frozen=True)
class Link:
    """A nominal rate in GB/s (1e9 B/s) and where it was read."""

    gbps: float
    source: str


def nvlink_of(facts: RankFacts) -> Link | None:
    """The NVLink bandwidth of the rank's GPU (local rank's index), where it has active links."""
    gpus = facts.gpus
    if not gpus:
        return None
    gpu = gpus[facts.world.local_rank] if facts.world.local_rank < len(gpus) else gpus[0]
    links, version = gpu.nvlink_active, gpu.nvlink_version
    per_link = NVLINK_GBPS_PER_LINK.get(version)
    if links <= 0 or per_link is None:
        return None
    return Link(links * per_link, f"NVLink{version} x{links}")


def network_link_of(facts: RankFacts) -> Link | None:
    """The rate of the rank's chosen interface: its IB/RoCE port, else its Ethernet speed."""
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


def group_link(ranks: Sequence[int], facts_by_rank: Mapping[int, RankFacts]) -> Link | None:
    """The nominal link of a group: NVLink inside one host, the slowest network link across hosts."""
    members = [facts_by_rank[r] for r in ranks if r in facts_by_rank]
    if len(members) != len(ranks) or len(members) < 2:
        return None
    if len({f.host for f in members}) == 1:
        links = [nvlink_of(f) for f in members]
    else:
        links = [network_link_of(f) for f in members]
    if any(link is None for link in links):
        return None
    return min((link for link in links if link is not None), key=lambda link: link.gbps)


def annotate(results: list[ProbeResult], facts: Sequence[RankFacts]) -> None:
    """Set nominal_gbps / nominal_source on every result whose link rate is readable."""
    by_rank: dict[int, Any] = {f.rank: f for f in facts}
    cache: dict[tuple[int, ...], Link | None] = {}
    for result in results:
        key = tuple(result.ranks)
        if key not in cache:
            cache[key] = group_link(result.ranks, by_rank)
        link = cache[key]
        if link is not None:
            result.nominal_gbps, result.nominal_source = round(link.gbps, 3), link.source
