"""GPU and RDMA-port health facts: what NVML and the InfiniBand counters say about fitness for a long job.

Filled by preflight/steps/gather/gpu_health.py (NVML, through the one boundary
preflight/lib/nvml_source.py) and nic_health.py (sysfs under `--sysfs-root`), read by
checks/gpu_health.py and checks/nic_health.py. `None` on a field means NVML did not give it:
`GpuHealth.unavailable` names the reads NVML answered NotSupported / NoPermission (a fact of that
GPU, reported as info), `GpuHealth.errors` the reads that failed otherwise.
"""

from __future__ import annotations

from msgspec import Struct, field


class NvLinkHealth(Struct):
    """One NVLink of a GPU: its state and the data-link error counters NVML keeps."""

    link: int
    active: bool = False
    replay: int | None = None
    recovery: int | None = None
    crc_flit: int | None = None
    crc_data: int | None = None


class GpuFabric(Struct):
    """The GPU's NVLink fabric registration (NVML `nvmlDeviceGetGpuFabricInfoV`, preflight/lib/nvml_fabric.py).

    On an NVSwitch system (HGX H100/B200, GB200/GB300 NVL72) the fabric manager registers each GPU
    with the fabric: GPUs that report one `cluster_uuid` and `clique_id` share an NVLink domain,
    which on an NVL72 rack spans hosts. Elsewhere the state is 0 (not supported).
    """

    state: int = 0  # NVML_GPU_FABRIC_STATE_*: 0 not supported, 1 not started, 2 in progress, 3 completed
    status: int = 0  # an nvmlReturn_t: 0 success
    cluster_uuid: str = ""  # the NVLink domain's UUID, "" when NVML gave none (all zero)
    clique_id: int = 0  # the partition within the domain
    health_mask: int | None = None  # NVML_GPU_FABRIC_HEALTH_MASK_* fields; None before the V call (v1 struct)
    health_summary: int | None = None  # NVML_GPU_FABRIC_HEALTH_SUMMARY_*; None before struct v3
    waited_s: float = 0.0  # how long a transient state was read again before it settled or was kept

    @property
    def domain(self) -> str:
        """`<cluster uuid>/<clique>` once registered with a domain; "" otherwise."""
        return f"{self.cluster_uuid}/{self.clique_id}" if self.state == 3 and self.cluster_uuid else ""


class GpuProcess(Struct):
    """A process NVML sees on a GPU (a compute context)."""

    pid: int
    name: str = ""
    used_bytes: int | None = None


class GpuHealth(Struct):
    """One GPU's health reads, for the device this rank is bound to."""

    index: int
    pci_bus_id: str = ""
    lost: bool = False  # NVML said GPU_IS_LOST: it fell off the bus
    unavailable: list[str] = field(default_factory=list)  # reads NVML answered NotSupported / NoPermission
    errors: list[str] = field(default_factory=list)  # reads that failed otherwise
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_volatile: int | None = None
    ecc_enabled: bool | None = None
    ecc_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages_pending: bool | None = None
    recovery_action: int | None = None  # NVML_GPU_RECOVERY_ACTION_*: 0 none, 1 reset, 2 reboot, 3/4 drain
    clock_event_reasons: int | None = None  # nvmlClocksEventReason bitmask
    pcie_width: int | None = None
    pcie_max_width: int | None = None
    pcie_gen: int | None = None
    pcie_max_gen: int | None = None
    nvlinks_read: int = 0  # NVLinks NVML reported on (18 on an H100 SXM; 0 without NVLink)
    # Only the links worth a look (inactive, or with an error count): a healthy GPU's 18 links would
    # otherwise be most of a 16k-rank report.
    nvlinks: list[NvLinkHealth] = field(default_factory=list)
    fabric: GpuFabric | None = None  # None: NVML did not give it (NotSupported before Hopper)
    persistence_mode: bool | None = None
    compute_mode: int | None = None  # 0 default, 2 prohibited, 3 exclusive process
    mig_enabled: bool | None = None
    mig_instance: str = ""  # the MIG instance this rank is bound to ("MIG-<uuid>"); "" the whole GPU
    processes: list[GpuProcess] | None = None
    memory_used_bytes: int | None = None
    temperature_c: int | None = None
    slowdown_c: int | None = None
    power_limit_mw: int | None = None
    power_default_mw: int | None = None
    vbios: str = ""


def port_key(device: str, port: int | str) -> str:
    """How an RDMA port is named in facts and findings: mlx5_0/1."""
    return f"{device}/{port}"


class IbCounters(Struct):
    """The error counters of one RDMA port under `ports/N/counters`, read once."""

    device: str
    port: int | str
    counters: dict[str, int] = field(default_factory=dict)


class HealthFacts(Struct):
    """GPU and NIC health of one rank: its bound GPU, its host's NCCL ports and their counters."""

    nvml: str = ""  # "ok"; "unavailable: <why>" (no driver); "" when the gatherer did not run
    nvidia_device_nodes: bool = False  # /dev/nvidiactl exists: this host has (or had) an NVIDIA driver loaded
    bound_index: int | None = None  # the NVML index of the GPU this rank will use
    bound_reason: str = ""  # how it was chosen, or why none could be
    visible_gpus: int | None = None  # GPUs this rank may use (CUDA_VISIBLE_DEVICES applied)
    gpus: list[GpuHealth] = field(default_factory=list)  # the bound GPU (empty without one)
    xid_watch: str = ""  # "watching": critical XID events of the bound GPU are collected until after the probes
    nccl_ports: list[str] = field(default_factory=list)  # "mlx5_0/1": the RDMA ports NCCL would use here
    nccl_ports_source: str = ""  # "NCCL_IB_HCA=..." or "every active port"
    ib_counters: list[IbCounters] = field(default_factory=list)  # read at facts time
    peermem: bool | None = None  # nvidia_peermem (or nv_peer_mem) loaded; None when unknown
    # /dev/nvidia-caps-imex-channels/: the IMEX channels this rank can open (["channel0"]); None when not read
    imex_channels: list[str] | None = None
