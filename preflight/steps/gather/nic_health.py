"""The RDMA ports NCCL would use on this host, their error counters, and GPUDirect RDMA support.

Runs after links.py (reads `facts.network.ib_ports`) and fills `facts.health`'s NIC part:

* `nccl_ports`: the ports NCCL's IB transport would use: those NCCL_IB_HCA selects when it is
  set (NCCL's syntax: `mlx5_0:1,mlx5_1`, a `^` prefix excludes, a `=` prefix matches names
  exactly instead of as prefixes), else every ACTIVE port.
* `ib_counters`: the error counters of those ports under
  `<sysfs>/class/infiniband/<dev>/ports/<n>/counters/`, read now; steps/recheck.py reads them
  again after the probes, and an increase is NIC001.
* `peermem`: whether `nvidia_peermem` (or the older `nv_peer_mem`) is loaded, from
  `<sysfs>/module/`; None when that folder is not there to say.

The sysfs root is `--sysfs-root` (default /sys): tests point it at fixture trees.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from preflight.lib.ib_hca import HcaFilter
from preflight.model import IbCounters, IbPort, RankFacts
from preflight.model.health_facts import port_key

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions

# The counters a degraded port shows (ibdiagnet's, NCCL troubleshooting's); read where present.
ERROR_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "port_xmit_discards",
                  "excessive_buffer_overrun_errors", "local_link_integrity_errors", "link_error_recovery",
                  "port_rcv_remote_physical_errors")
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")


def select_ports(spec: str | None, ports: Sequence[IbPort]) -> list[IbPort]:
    """The ports NCCL_IB_HCA selects (NCCL's rules), or every ACTIVE one when it is unset or empty."""
    hca = HcaFilter.parse(spec)
    if hca is None:
        return [p for p in ports if p.state == "ACTIVE"]
    return [p for p in ports if hca.allows(p.device, p.port)]


def read_counters(sysfs_root: str, ports: Sequence[IbPort]) -> list[IbCounters]:
    """The error counters of each port (absent or unreadable counters are left out)."""
    found = []
    for port in ports:
        folder = Path(sysfs_root, "class", "infiniband", port.device, "ports", str(port.port), "counters")
        counters: dict[str, int] = {}
        for name in ERROR_COUNTERS:
            try:
                text = (folder / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit() and len(text) <= 20:
                counters[name] = int(text)
        found.append(IbCounters(port.device, port.port, counters))
    return found


def peermem_loaded(sysfs_root: str) -> bool | None:
    """nvidia_peermem / nv_peer_mem loaded (True), not (False), or unknown without <sysfs>/module."""
    modules = Path(sysfs_root, "module")
    if not modules.is_dir():
        return None
    return any((modules / name).is_dir() for name in PEERMEM_MODULES)


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.health.nccl_ports, ib_counters and peermem."""
    health = facts.health
    spec = os.environ.get("NCCL_IB_HCA")
    ports = select_ports(spec, facts.network.ib_ports)
    health.nccl_ports = [port_key(p.device, p.port) for p in ports]
    health.nccl_ports_source = f"NCCL_IB_HCA={spec}" if spec and spec.strip() else "every active port"
    health.ib_counters = read_counters(options.sysfs_root, ports)
    health.peermem = peermem_loaded(options.sysfs_root)
