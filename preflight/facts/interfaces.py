"""This host's network interfaces (psutil), the minimal list the configuration checks need.

Fills `facts.network["interfaces"]` with one dict per interface, in this shape (shared with
the network facts in preflight/facts/network.py, which add more beside it):

    {"name": "ib0", "up": True, "mtu": 2044, "addresses": ["10.0.0.7", "fe80::1"]}

It also records `facts.network["ib_devices"]` (device names under <sysfs>/class/infiniband)
unless another gatherer already filled it: the IB-dependent checks (NCCL_IB_DISABLE,
RLIMIT_MEMLOCK) need to know whether this host has RDMA devices at all.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

from preflight.model import RankFacts

if TYPE_CHECKING:
    from preflight.facts import GatherOptions

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
            "addresses": [a.address.split("%", 1)[0] for a in addresses.get(name, []) if a.family in _FAMILIES],
        })
    return interfaces


def read_ib_devices(sysfs_root: str) -> list[dict[str, Any]]:
    """RDMA devices by name (`mlx5_0`, ...) from <sysfs_root>/class/infiniband."""
    folder = os.path.join(sysfs_root, "class", "infiniband")
    try:
        return [{"name": name} for name in sorted(os.listdir(folder))]
    except OSError:  # no such folder: no IB stack on this host
        return []


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.network["interfaces"] (and ib_devices where nobody did)."""
    facts.network["interfaces"] = read_interfaces()
    facts.network.setdefault("ib_devices", read_ib_devices(options.sysfs_root))
