"""Where a GPU sits on its host's PCIe tree, from sysfs: the switch it shares and its NUMA node.

The device probes need both for the host-link figures: GPUs behind one PCIe switch share its
uplink (a DGX A100 has two per switch, ~12-13 GB/s each when both copy, ~0.4 of Gen4 x16), so
their copies to and from the host take turns; a pinned buffer first touched on a remote NUMA
node reads 20-40% lower, so it is made on the GPU's node. Read under `--sysfs-root` (default
/sys), as every sysfs read of preflight is, so tests lay out a DGX-like tree of real files and
symlinks.

`<root>/bus/pci/devices/<bus id>` is a symlink into `<root>/devices/pci<domain>:<bus>/...`: the
chain of bridges from the root complex down to the device (`pci_path`). The one definition of
"the switch a device shares" (`uplink`), used by the host-link turns and by the affinity checks
alike: the upstream port of the top-level switch under the device's root port. Everything below
one root port crosses that link to reach the CPU and its memory, however many levels of switch
(a PLX under a root port, a second switch under the first) lie between, and two devices below it
reach each other without crossing the root complex (NCCL's PIX/PXB). A device straight on a
root port has that port's link to itself: its "switch" is the root port, shared with nobody.
PCI domains may be longer than four hex digits (Intel VMD puts devices in domain 10000).
"""

from __future__ import annotations

import os
import re

from msgspec import Struct

_BUS_ID = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


class PciPlace(Struct, frozen=True):
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


def pci_path(link: str) -> list[str]:
    """The bus ids from the root port down to the device `link` (a sysfs device link) leads to; [] unknown."""
    try:
        target = os.path.realpath(link, strict=True)
    except (OSError, RuntimeError):
        return []
    return [part for part in target.split(os.sep) if _BUS_ID.fullmatch(part)]


def uplink(path: list[str]) -> str:
    """The link a device shares on its way to the CPU ("" unknown): the top-level switch's upstream port
    under its root port, or the root port itself for a device straight on one."""
    if len(path) >= 3:
        return path[1]
    return path[0] if len(path) == 2 else ""


def shares_uplink(a: list[str], b: list[str]) -> bool:
    """Two devices behind one PCIe switch below one root port (either of them on a root port of its own: no)."""
    return len(a) >= 3 and len(b) >= 3 and uplink(a) == uplink(b)


def numa_node(link: str) -> int | None:
    """The NUMA node sysfs gives the device `link` leads to (None: none, -1, or unreadable)."""
    try:
        with open(os.path.join(link, "numa_node"), encoding="ascii") as handle:
            value = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def place(bus_id: str, root: str = "/sys") -> PciPlace:
    """The switch and NUMA node of the PCI device `bus_id`; unknown parts empty (never raises)."""
    if not bus_id:
        return PciPlace()
    link = os.path.join(root, "bus", "pci", "devices", sysfs_bus_id(bus_id))
    return PciPlace(uplink(pci_path(link)), numa_node(link))


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
