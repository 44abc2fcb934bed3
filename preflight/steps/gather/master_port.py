"""The state of MASTER_PORT on the rank that will host the store, before it tries.

Only rank 0 hosts the c10d store, and only when no launcher agent already does (under
torchrun the agent's store legitimately holds MASTER_PORT). On that rank this gatherer fills
`facts.network.master_port` (a MasterPortState) with:

* `in_use`: the port cannot be bound (another listener has it), and `holders`: the pid and
  command of each process listening on it, where /proc shows them (psutil reads
  /proc/net/tcp* and /proc/*/fd; other users' processes are invisible to non-root).
* `ephemeral_range`: /proc/sys/net/ipv4/ip_local_port_range, where an outgoing connection
  can take the port first.
* `privileged`: below 1024, which only root (CAP_NET_BIND_SERVICE) may bind.
* `suggested_port`: a port derived from the job id that is free right now.
"""

from __future__ import annotations

import errno
import os
import socket
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from preflight.lib.secrets import redact_command
from preflight.model import MasterPortState, PortHolder, RankFacts
from preflight.steps.launchers import derive_port

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions


def port_in_use(port: int) -> bool:
    """True when a listener holds the port on any local address (as the store would bind it)."""
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this host
        with sock:
            # SO_REUSEADDR, as the store sets it: TIME_WAIT leftovers are not "in use".
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


def port_holders(port: int) -> list[PortHolder]:
    """Processes listening on the port, with pid and command line where visible."""
    import psutil

    holders: list[PortHolder] = []
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return holders
    for conn in connections:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
            continue
        entry = PortHolder(address=str(conn.laddr.ip), pid=conn.pid)
        if conn.pid:
            try:
                entry.command = redact_command(" ".join(psutil.Process(conn.pid).cmdline()))[:300]
            except psutil.Error:
                pass
        if entry not in holders:
            holders.append(entry)
    return holders


def ephemeral_range(proc_root: str = "/proc") -> list[int] | None:
    """The host's ephemeral port range [low, high], or None when unreadable."""
    try:
        low, high = Path(proc_root, "sys/net/ipv4/ip_local_port_range").read_text().split()[:2]
        return [int(low), int(high)]
    except (OSError, ValueError):
        return None


def suggest_port(job_id: str, tries: int = 20) -> int | None:
    """A port derived from the job id (as preflight does for an unset MASTER_PORT) that is free now."""
    seed = job_id or "preflight"
    for attempt in range(tries):
        port = derive_port(seed if attempt == 0 else str(zlib.crc32(f"{seed}/{attempt}".encode())))
        if not port_in_use(port):
            return port
    return None


def hosts_store(facts: RankFacts) -> bool:
    """Whether this rank will host the c10d store itself (rank 0, no launcher agent store)."""
    return facts.world.rank == 0 and not facts.world.use_agent_store and facts.world.master_port != 0


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """On the store-hosting rank only: is MASTER_PORT free, safe and permitted?"""
    if not hosts_store(facts):
        return
    port = facts.world.master_port
    in_use = port_in_use(port)
    facts.network.master_port = MasterPortState(
        port=port,
        in_use=in_use,
        holders=port_holders(port) if in_use else [],
        ephemeral_range=ephemeral_range(),
        privileged=port < 1024,
        root=os.geteuid() == 0,
        suggested_port=suggest_port(facts.world.job_id or facts.world.run_id),
    )
