"""Where a GPU sits on its host's PCIe tree, from sysfs: the switch it shares and its NUMA node.

The device probes need both for the host-link figures: GPUs behind one PCIe switch share its
uplink (a DGX A100 has two per switch, ~12-13 GB/s each when both copy, ~0.4 of Gen4 x16), so
their copies to and from the host take turns; a pinned buffer first touched on a remote NUMA
node reads 20-40% lower, so it is made on the GPU's node. Read under `--sysfs-root` (default
/sys), as every sysfs read of preflight is, so tests lay out a DGX-like tree of real files and
symlinks.

`<root>/bus/pci/devices/<bus id>` is a symlink into `<root>/devices/pci<domain>:<bus>/...`: the
chain of bridges from the root complex down to the device. A switch is an upstream port with
downstream ports below it: a device three or more bridges deep sits behind one, and its
switch is the upstream port (two above the device). A device on a root port (one or two
deep) has a link of its own: its "switch" is that port, shared with nobody.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class PciPlace:
    """A device's place: the upstream port whose link it shares ("" unknown) and its NUMA node (None unknown)."""

    switch: str = ""
    numa: int | None = None


def sysfs_bus_id(bus_id: str) -> str:
    """NVML's / torch's bus id (8-digit domain, upper case) as sysfs names it: 0000:07:00.0."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or not rest:
        return text
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return text


def place(bus_id: str, root: str = "/sys") -> PciPlace:
    """The switch and NUMA node of the PCI device `bus_id`; unknown parts empty (never raises)."""
    if not bus_id:
        return PciPlace()
    link = os.path.join(root, "bus", "pci", "devices", sysfs_bus_id(bus_id))
    try:
        chain = [part for part in os.path.realpath(link).split(os.sep) if part.count(":") == 2]
    except OSError:
        chain = []
    switch = chain[-3] if len(chain) >= 3 else (chain[-2] if len(chain) == 2 else "")
    numa = None
    try:
        with open(os.path.join(link, "numa_node"), encoding="ascii") as handle:
            value = int(handle.read().strip())
        numa = value if value >= 0 else None
    except (OSError, ValueError):
        pass
    return PciPlace(switch, numa)


def node_cpus(numa: int, root: str = "/sys") -> set[int]:
    """The CPUs of NUMA node `numa` (its cpulist, e.g. "0-15,32-47"); empty when unknown."""
    try:
        with open(os.path.join(root, "devices", "system", "node", f"node{numa}", "cpulist"), encoding="ascii") as f:
            text = f.read().strip()
    except OSError:
        return set()
    cpus: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        try:
            cpus.update(range(int(first), int(last or first) + 1))
        except ValueError:
            return set()
    return cpus
