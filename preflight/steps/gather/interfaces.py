"""This host's network interfaces (psutil), the minimal list the configuration checks need.

Fills `facts.network.interfaces` with one `Interface` per interface (name, up, mtu, speed,
addresses). The RDMA ports (`facts.network.ib_ports`) come from links.py beside this file.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from preflight.model import Interface, RankFacts

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions

_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def read_interfaces() -> list[Interface]:
    """Every interface psutil sees, sorted by name, with its IPv4/IPv6 addresses."""
    import psutil

    addresses = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    interfaces = []
    for name in sorted(set(addresses) | set(stats)):
        stat = stats.get(name)
        interfaces.append(Interface(
            name=name,
            up=bool(stat.isup) if stat else False,
            mtu=int(stat.mtu) if stat else 0,
            speed_mbps=int(stat.speed) if stat else 0,
            addresses=[a.address.split("%", 1)[0] for a in addresses.get(name, []) if a.family in _FAMILIES],
        ))
    return interfaces


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.network.interfaces."""
    facts.network.interfaces = read_interfaces()
