"""Where a rank sits (World) and what it saw (RankFacts), one typed section per fact gatherer.

Each section is filled by one gatherer in preflight/steps/gather/ and read by checks and
renderers as attributes; a field a gatherer could not fill keeps its default, and the
gatherer's failure is in `RankFacts.gather_errors`.
"""

from __future__ import annotations

import msgspec
from msgspec import Struct, field

from preflight.model.health_facts import HealthFacts
from preflight.model.placement_facts import PlacementFacts


class World(Struct):  # rank 0 holds one per rank: no __dict__ (~1 kB a rank at 131,072 ranks)
    """Where this rank sits in the job, as the launcher described it."""

    launcher: str
    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    # The launcher said which node this is (GROUP_RANK, SLURM_NODEID, PET_NODE_RANK, NODE_RANK):
    # then a node is (host, node_rank), so two nodes that share a host name stay two nodes.
    node_rank_given: bool = False
    host: str = ""
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    job_id: str = ""
    run_id: str = ""
    restart_count: int = 0
    # Torchrun's agent already hosts a store at master_addr:master_port; join it instead.
    use_agent_store: bool = False
    # The launcher's placement: expected host for every rank, where it says (Slurm, torchrun).
    expected_hosts: dict[int, str] = field(default_factory=dict)
    # The raw variables each decision came from, and how it was made.
    raw: dict[str, str] = field(default_factory=dict)
    decisions: list[str] = field(default_factory=list)


class Versions(Struct):
    """Software that must agree across ranks; "" where unknown (no GPU driver, no NCCL build)."""

    python: str = ""
    torch: str = ""
    torch_cuda: str = ""
    gloo: str = ""  # "yes" / "no": torch.distributed built with gloo
    nccl_built: str = ""  # "yes" / "no"
    nccl: str = ""  # the NCCL torch was compiled against (its headers' version)
    driver: str = ""  # NVIDIA driver, from NVML
    cuda_driver: str = ""  # the CUDA version the driver supports, from NVML
    # The libraries this process actually mapped, each by its own version call (lib/loaded_libraries.py):
    # a pip wheel, a conda package or LD_LIBRARY_PATH may load another than torch was built with.
    libnccl: str = ""  # ncclGetVersion of the mapped libnccl.so
    libcudnn: str = ""  # cudnnGetVersion of the mapped libcudnn.so
    libcublas: str = ""  # cublasGetProperty of the mapped libcublas.so (the digest's key names it too)

    def known(self) -> dict[str, str]:
        """The versions that were read, by name, for tables."""
        return {name: value for name, value in msgspec.structs.asdict(self).items() if value}


class SystemLimits(Struct):
    """Process and host limits that break NCCL transports."""

    pid: int = 0
    cpu_count: int = 0
    memlock_bytes: int | None = None  # RLIMIT_MEMLOCK soft limit; -1 unlimited; None unread
    shm_bytes: int | None = None  # size of /dev/shm; None unreadable


class Interface(Struct):
    """One network interface as psutil sees it."""

    name: str
    up: bool = False
    mtu: int = 0
    speed_mbps: int = 0  # 0: unknown (loopback, most virtual links)
    addresses: list[str] = field(default_factory=list)  # IPv4 and IPv6, without %scope


class IbPort(Struct):
    """One InfiniBand / RoCE port under <sysfs>/class/infiniband/<device>/ports/<port>."""

    device: str
    port: int | str
    state: str = ""  # ACTIVE, DOWN, ...
    state_code: int | None = None
    phys_state: str = ""  # LinkUp, Polling, ...
    phys_state_code: int | None = None
    rate: str = ""  # "400 Gb/sec (4X NDR)"
    rate_gbps: float | None = None
    link_layer: str = ""  # InfiniBand / Ethernet (RoCE)
    netdevs: list[str] = field(default_factory=list)
    # RoCE ports: GID index -> type (`RoCE v2`, `IB/RoCE v1`) of each populated GID, gid_attrs/types/<index>
    gid_types: dict[int, str] = field(default_factory=dict)
    hca_type: str = ""  # the device's model (`MT4129`), <device>/hca_type
    fw_ver: str = ""  # the device's firmware version, <device>/fw_ver
    board_id: str = ""  # the board's PSID (`MT_0000000838`), <device>/board_id
    waited_s: float = 0.0  # how long a training link (INIT, Polling) was read again before it settled or was kept


class ChosenInterface(Struct):
    """The interface NCCL/Gloo sockets will use on this rank, and why that one."""

    name: str = ""  # "" when there is none
    source: str = ""  # e.g. "NCCL_SOCKET_IFNAME=ib", "route to MASTER_ADDR ..."
    address: str = ""
    up: bool = False
    mtu: int = 0


class MasterAddrResolution(Struct):
    """What MASTER_ADDR resolved to on this rank."""

    addr: str = ""
    ips: list[str] = field(default_factory=list)
    error: str = ""


class PortHolder(Struct):
    """A process listening on MASTER_PORT."""

    address: str = ""
    pid: int | None = None
    command: str = ""


class MasterPortState(Struct):
    """MASTER_PORT on the rank that will host the store, before it tries."""

    port: int
    in_use: bool = False
    holders: list[PortHolder] = field(default_factory=list)
    ephemeral_range: list[int] | None = None  # [low, high] of ip_local_port_range
    privileged: bool = False
    root: bool = False
    suggested_port: int | None = None


class NetworkFacts(Struct):
    """Interfaces, RDMA ports, the chosen interface and the rendezvous address and port."""

    interfaces: list[Interface] | None = None  # None: the interfaces gatherer did not run
    ib_ports: list[IbPort] = field(default_factory=list)
    chosen_interface: ChosenInterface | None = None
    loopback_scope: str = ""  # boot id + netns: ranks with the same value share 127.0.0.1
    master_addr: MasterAddrResolution | None = None
    master_port: MasterPortState | None = None  # only on the rank that hosts the store


class GpuFacts(Struct):
    """One GPU as NVML sees it."""

    index: int
    name: str = ""
    uuid: str = ""
    serial: str = ""  # the board's serial (NVML), "" where the GPU has none: the history's second key
    pci_bus_id: str = ""
    memory_total_bytes: int = 0
    nvlink_active: int = 0
    nvlink_version: int = 0  # the NVLink generation (3 for NVLink 3.0/3.1), not NVML's version enum
    error: str = ""  # the NVML reads that failed on this device (NO_PERMISSION, GPU_IS_LOST, ...)


class RankFacts(Struct):
    """What one rank saw locally, one typed section per gatherer."""

    rank: int
    host: str
    world: World
    env: dict[str, str] = field(default_factory=dict)  # redacted: secrets are "<redacted>:<hash>"
    versions: Versions = field(default_factory=Versions)
    system: SystemLimits = field(default_factory=SystemLimits)
    network: NetworkFacts = field(default_factory=NetworkFacts)
    gpus: list[GpuFacts] = field(default_factory=list)
    health: HealthFacts = field(default_factory=HealthFacts)  # GPU and RDMA-port health (health_facts.py)
    placement: PlacementFacts = field(default_factory=PlacementFacts)  # build, clock, affinity (placement_facts.py)
    gather_errors: dict[str, str] = field(default_factory=dict)  # gatherer name -> why it failed
