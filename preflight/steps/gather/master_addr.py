"""What MASTER_ADDR resolves to on this rank (ranks must agree on it, checks/agreement.py).

Fills `facts.network.master_addr` (addr, its sorted ips, or the lookup error). A name that
resolves differently on different hosts (a stale /etc/hosts, split DNS) sends ranks to
different rendezvous endpoints even though MASTER_ADDR is the same text.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING

from preflight.model import MasterAddrResolution, RankFacts

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions


def resolve(addr: str) -> list[str]:
    """The sorted IPv4/IPv6 addresses a host name resolves to (raises OSError)."""
    try:
        return [str(ipaddress.ip_address(addr))]  # a literal address needs no lookup
    except ValueError:
        pass
    infos = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]).split("%", 1)[0] for info in infos})


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Resolve this rank's MASTER_ADDR (the gatherer's deadline bounds a slow resolver)."""
    addr = facts.world.master_addr
    entry = MasterAddrResolution(addr=addr)
    try:
        entry.ips = resolve(addr)
    except OSError as exc:
        entry.error = f"{type(exc).__name__}: {exc}"[:200]
    facts.network.master_addr = entry
