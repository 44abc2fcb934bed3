"""Where a rank sits beyond the launcher's layout: its exact build, its clock, its CPU/GPU/NIC placement.

One section of RankFacts (`RankFacts.placement`): the build, filled by
preflight/steps/gather/build.py and read by preflight/checks/build.py; the clock and the
affinity, filled and read by their own gatherers and checks.
"""

from __future__ import annotations

from msgspec import Struct, field


class DistBuild(Struct):
    """One installed distribution as its RECORD (pip's per-file hashes) describes it.

    `digest` is the hash of RECORD's entries from the wheel: equal digests, equal builds. To name the files
    that differ without shipping a 15,000-line RECORD per rank, a small distribution carries
    its entries (`files`: path -> RECORD hash) and a large one its entries hashed into
    `buckets` (file groups by path): rank 0 then says which groups differ, and how many files
    each holds.
    """

    name: str
    version: str
    digest: str = ""  # "" : no RECORD (an editable or a system install): not compared
    count: int = 0  # files in RECORD
    files: dict[str, str] = field(default_factory=dict)  # path -> hash (12 chars), for count <= SMALL_RECORD
    buckets: list[str] = field(default_factory=list)  # for larger ones: BUCKETS group digests
    location: str = ""  # where it is installed (site-packages folder)


SMALL_RECORD = 200  # files: a RECORD this small travels whole (~12 KB at most)
BUCKETS = 64


class BuildFacts(Struct):
    """This node's fingerprint of the distributions that matter, and the container it runs in (filled on
    each node's local rank 0 only; empty on the others)."""

    taken: bool = False  # this rank fingerprinted (its node's local rank 0); the others' parts stay empty
    dists: list[DistBuild] = field(default_factory=list)
    container: str = ""  # e.g. "apptainer:/path/image.sif", "docker", "podman:image=...", "" : none visible


class ClockFacts(Struct):
    """This host's wall clock against rank 0's, from store round trips during the exchange."""

    offset_s: float | None = None  # this clock minus rank 0's; None: not measured
    error_s: float | None = None  # half the best round trip: the offset is within +- this
    samples: int = 0
    threshold_s: float = 0.0  # this run's --expect clock_skew (each rank has the same options)
    daemon: str = ""  # chronyd / ntpd / systemd-timesyncd found running, "" none seen
    synchronised: bool | None = None  # the kernel's NTP status (adjtimex), None unreadable
    error: str = ""  # why it was not measured


class ClockStamp(Struct):
    """A wall-clock reading (time.time()) crossing the store: a clock ping, or rank 0's answer."""

    wall: float


class NicPlacement(Struct):
    """One NIC NCCL would use: its NUMA node and the PCIe switch above it (sysfs)."""

    name: str
    numa_node: int | None = None
    pci_path: list[str] = field(default_factory=list)  # bus ids from the root port down to the device
    chosen_by: str = ""  # NCCL_IB_HCA=..., NCCL_SOCKET_IFNAME=..., "every RDMA port"


class AffinityFacts(Struct):
    """This rank's allowed CPUs, its GPU's NUMA node and PCIe path, and the NICs NCCL would use."""

    cpus: list[int] = field(default_factory=list)  # sched_getaffinity
    gpu_bus_id: str = ""
    gpu_numa_node: int | None = None
    gpu_pci_path: list[str] = field(default_factory=list)
    numa_cpus: dict[int, list[int]] = field(default_factory=dict)  # NUMA node -> its CPUs (sysfs)
    nics: list[NicPlacement] = field(default_factory=list)  # what NCCL would use
    local_nics: list[str] = field(default_factory=list)  # RDMA devices on the GPU's switch or NUMA node
    torchrun_numa_binding: bool = False  # this torch's torchrun has --numa-binding (torch.numa)


class PlacementFacts(Struct):
    """The three parts, each filled by its own gatherer."""

    build: BuildFacts = field(default_factory=BuildFacts)
    clock: ClockFacts = field(default_factory=ClockFacts)
    affinity: AffinityFacts = field(default_factory=AffinityFacts)
