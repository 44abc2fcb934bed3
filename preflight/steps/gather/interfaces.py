"""This host's network interfaces (psutil), the minimal list the configuration checks need.

Fills `facts.network["interfaces"]` with one dict per interface, in this shape (shared with
the network facts in preflight/facts/network.py, which add more beside it):

    {"name": "ib0", "up": True, "mtu": 2044, "speed_mbps": 100000, "addresses": ["10.0.0.7", "fe80::1"]}

The RDMA ports (`facts.network["ib_devices"]`) come from preflight/facts/network.py.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from preflight.model import RankFacts

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions

_FAMILIES = (socket.AF_INET, socket.AF_INET6)


def read_interfaces() -> list[dict[str, Any]]:
    """Every interface psutil sees, sorted by name, with its IPv4/IPv6 addresses."""
    import psutil

    addresses = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    interfaces = []
    for name in sorted(set(addresses) | set(stats)):
        stat = stats.get(name)
        interfaces.append({
            "name": name,
            "up": bool(stat.isup) if stat else False,
            "mtu": int(stat.mtu) if stat else 0,
            "speed_mbps": int(stat.speed) if stat else 0,  # 0: unknown (loopback, most virtual links)
            "addresses": [a.address.split("%", 1)[0] for a in addresses.get(name, []) if a.family in _FAMILIES],
        })
    return interfaces


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.network["interfaces"]."""
    facts.network["interfaces"] = read_interfaces()
