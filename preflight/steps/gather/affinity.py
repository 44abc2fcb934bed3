"""Where this rank's threads may run against where its GPU and NICs sit (sysfs under --sysfs-root).

- its allowed CPUs (sched_getaffinity: what taskset, srun --cpu-bind or numactl left it);
- its GPU (the one health gathering bound it to, by NVML's PCI bus id): the NUMA node and the PCIe
  path from the root port down (`<root>/bus/pci/devices/<bdf>`, a link into `devices/`);
- the NICs NCCL would use: the RDMA devices NCCL_IB_HCA allows (every one when unset), else the
  socket interface NCCL_SOCKET_IFNAME chose; each with its NUMA node and PCIe path; and the RDMA
  devices local to the GPU (behind the same PCIe switch, lib/pci_topology.uplink, else on the same
  NUMA node);
- each NUMA node's CPUs (`devices/system/node/node<N>/cpulist`).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from preflight.lib import pci_topology
from preflight.lib.cpulist import parse_cpulist
from preflight.lib.ib_hca import HcaFilter
from preflight.model import RankFacts
from preflight.model.placement_facts import AffinityFacts, NicPlacement

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.placement.affinity (CPUs always; the rest where this rank has a GPU)."""
    aff = facts.placement.affinity = AffinityFacts(cpus=sorted(os.sched_getaffinity(0)))
    root = Path(options.sysfs_root)
    aff.numa_cpus = numa_cpus(root)
    aff.torchrun_numa_binding = importlib.util.find_spec("torch.numa") is not None
    bound = facts.health.bound_index
    gpu = next((g for g in facts.gpus if g.index == bound), None) if bound is not None else None
    if gpu is None or not gpu.pci_bus_id:
        return
    aff.gpu_bus_id = pci_topology.sysfs_bus_id(gpu.pci_bus_id)
    aff.gpu_numa_node, aff.gpu_pci_path = pci_place(root / "bus" / "pci" / "devices" / aff.gpu_bus_id)
    rdma = rdma_nics(root)
    hca = HcaFilter.parse(os.environ.get("NCCL_IB_HCA"))
    if rdma:
        ports = {nic.name: _ports(root, nic.name) for nic in rdma}
        chosen_by = f"NCCL_IB_HCA={os.environ['NCCL_IB_HCA'][:40]}" if hca else "every RDMA port"
        aff.nics = [NicPlacement(nic.name, nic.numa_node, nic.pci_path, chosen_by) for nic in rdma
                    if hca is None or any(hca.allows(nic.name, p) for p in ports[nic.name])]
    elif facts.network.chosen_interface and facts.network.chosen_interface.name:
        chosen = facts.network.chosen_interface
        numa, path = pci_place(root / "class" / "net" / chosen.name / "device")
        if path:
            aff.nics = [NicPlacement(chosen.name, numa, path, chosen.source)]
    aff.local_nics = [nic.name for nic in local_to(aff.gpu_numa_node, aff.gpu_pci_path, rdma)]


def pci_place(link: Path) -> tuple[int | None, list[str]]:
    """A PCI device's NUMA node (None: none or unknown) and the bus ids from its root port down."""
    return pci_topology.numa_node(str(link)), pci_topology.pci_path(str(link))


def rdma_nics(root: Path) -> list[NicPlacement]:
    """Every RDMA device under class/infiniband, placed (no chooser yet)."""
    base = root / "class" / "infiniband"
    try:
        names = sorted(p.name for p in base.iterdir())
    except OSError:
        return []
    return [NicPlacement(name, *pci_place(base / name / "device")) for name in names[:256]]


def _ports(root: Path, device: str) -> list[int]:
    try:
        return sorted(int(p.name) for p in (root / "class" / "infiniband" / device / "ports").iterdir()
                      if p.name.isdigit())
    except OSError:
        return [1]


def local_to(numa: int | None, path: list[str], nics: list[NicPlacement]) -> list[NicPlacement]:
    """The NICs on the GPU's PCIe switch, else on its NUMA node (NCCL's own preference order)."""
    same_switch = [nic for nic in nics if pci_topology.shares_uplink(path, nic.pci_path)]
    if same_switch:
        return same_switch
    return [nic for nic in nics if numa is not None and nic.numa_node == numa]


def numa_cpus(root: Path) -> dict[int, list[int]]:
    """NUMA node -> its CPUs, from devices/system/node/node<N>/cpulist."""
    nodes: dict[int, list[int]] = {}
    try:
        entries = list((root / "devices" / "system" / "node").glob("node[0-9]*"))
    except OSError:
        return nodes
    for entry in entries[:1024]:
        try:
            nodes[int(entry.name[4:])] = parse_cpulist(entry.joinpath("cpulist").read_text())
        except (OSError, ValueError):
            continue
    return dict(sorted(nodes.items()))
