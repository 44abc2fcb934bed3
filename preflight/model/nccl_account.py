"""NCCL's own account of a run, as one process's INFO log states it (issue 42).

Each rank parses its own NCCL log (preflight/lib/nccl_log.py) into one `NcclAccount` and sends
that, never the log: every list here is bounded (MAX_* below), so a 1 GB log costs rank 0 the
same few hundred bytes as a healthy one. `preflight nccl-log` builds the same type from logs a
user already has. Fields NCCL's log did not state keep their default ("" / None), never a guess.
"""

from __future__ import annotations

import functools

from msgspec import Struct, field

MAX_NICS = 16  # NCCL uses at most a few NICs per GPU; a DGX has 8 per host
MAX_WARNINGS = 8  # the first NCCL WARN lines, each cut to MAX_TEXT
MAX_TRANSPORTS = 16  # distinct transport names per class (P2P/CUMEM, SHM/direct/direct, NET/IB/0/GDRDMA ...)
MAX_TEXT = 240


class NcclNic(Struct):
    """One network device NCCL listed (`NET/IB : Using [0]mlx5_0:1/IB ...`, `NET/Socket : Using [0]eth0:...`)."""

    index: int
    device: str  # mlx5_0, eth0, or the plugin's device name
    port: int | None = None  # the IB port; None for a socket interface
    link_layer: str = ""  # IB, RoCE, UNSPECIFIED; "" for sockets
    gdr: bool | None = None  # NCCL's `GPU Direct RDMA Enabled/Disabled for HCA n` (NET subsystem only)


class NcclPlugin(Struct):
    """The net plugin: loaded (and which), or why not in NCCL's words."""

    loaded: bool = False
    name: str = ""  # the loaded plugin's network name (Libfabric, IBext_v8, ...)
    why: str = ""  # NCCL's line when none loaded ("NET/Plugin: Could not find: libnccl-net.so. ...")


class NcclAccount(Struct):
    """What NCCL said it chose in one process: network, NICs, GPUDirect RDMA, transports, warnings.

    `intra` / `inter` count channel connections by transport as NCCL printed it ("P2P/CUMEM",
    "SHM/direct/direct", "NET/IB/0/GDRDMA", "NET/Socket/0"): a connection to a peer on this host
    is intra, one through the network (NET/, COLLNET/) is inter.
    """

    source: str = ""  # the file read; "" when none
    host: str = ""  # from the lines' `host:pid:tid` prefix
    pid: int = 0
    rank: int | None = None  # the rank in the first communicator this process initialised
    nranks: int = 0  # the largest communicator's size
    nnodes: int = 0  # `nNodes` (2.20+), 0 where the log does not say
    local_ranks: int = 0
    nccl_version: str = ""  # 2.21.5 (the banner's "+cuda12.4" is in cuda_version)
    cuda_version: str = ""
    plugin: NcclPlugin = field(default_factory=NcclPlugin)
    network: str = ""  # `Using network X`: IB, Socket, or the plugin's name; "" when not stated
    ib_found: bool | None = None  # False: `NET/IB : No device found.`
    nics: list[NcclNic] = field(default_factory=list)  # the NICs its network channels used (all listed if none)
    gdr: bool | None = None  # over the network paths this process used; None when the log cannot say
    gdr_reason: str = ""  # NCCL's words for GDR being off (distance, a level set by environment, HCA without it)
    dmabuf: bool | None = None  # `DMA-BUF is available on GPU device n`
    env_lines: list[str] = field(default_factory=list)  # `NCCL_X set by environment to Y` (bounded, NCCL_IB_/NET_ ones)
    intra: dict[str, int] = field(default_factory=dict)
    inter: dict[str, int] = field(default_factory=dict)
    nvls_available: bool | None = None  # `NVLS multicast support is [not ]available`
    nvls_used: bool = False  # an `NVLS comm ...` buffer line
    communicators: int = 0  # Init START lines
    channels: int = 0  # the most channels one communicator connected
    warnings: list[str] = field(default_factory=list)
    warnings_total: int = 0
    lines: int = 0  # lines read
    nccl_lines: int = 0  # lines that were NCCL's (INFO/WARN prefix, version banner)
    unreadable: int = 0  # lines that could not be read (binary, overlong, broken prefix)
    truncated_bytes: int = 0  # bytes of the file past the read bound, not read

    def transports(self) -> list[str]:
        """Every transport name this process used, intra first."""
        return [*self.intra, *self.inter]

    def network_transports(self) -> list[str]:
        """The inter-host transport names without channel index (NET/IB/GDRDMA, NET/Socket)."""
        return list(_classes(tuple(self.inter), False))

    def intra_transports(self) -> list[str]:
        """The intra-host transport classes (P2P/CUMEM, SHM, NVLS ...)."""
        return list(_classes(tuple(self.intra), self.nvls_used))


@functools.lru_cache(maxsize=4096)
def _classes(names: tuple[str, ...], nvls: bool) -> tuple[str, ...]:
    """Sorted transport classes of these names (cached: at 131,072 ranks the same few recur)."""
    found = {transport_class(name) for name in names}
    if nvls:
        found.add("NVLS")
    return tuple(sorted(found))


@functools.lru_cache(maxsize=4096)
def transport_class(name: str) -> str:
    """A transport as people name it: NET/IB/0/GDRDMA -> NET/IB/GDRDMA, NET/Socket/1 -> NET/Socket,
    P2P/IPC/read -> P2P/IPC, SHM/direct/direct -> SHM, NET/IB/0(8)/GDRDMA -> NET/IB/GDRDMA (PXN)."""
    parts = name.split("/")
    head = parts[0]
    if head in ("NET", "COLLNET") and len(parts) >= 2:
        gdr = "/GDRDMA" if "GDRDMA" in name else ""
        return f"{head}/{parts[1]}{gdr}"
    if head == "P2P" and len(parts) >= 2:
        return f"P2P/{parts[1].split()[0]}"
    if head.startswith("direct shared memory"):  # NCCL <= 2.12's wording of SHM
        return "SHM"
    return head


class NcclHostAccount(Struct):
    """One host's NCCL account: its ranks' accounts folded (a value its ranks disagree on is joined by ', ')."""

    host: str
    ranks: list[int] = field(default_factory=list)
    nccl_version: str = ""
    network: str = ""
    gdr: bool | None = None  # False when any rank's network paths lack GPUDirect RDMA
    plugin: str = ""  # the loaded plugin's name, "" none
    nics: list[str] = field(default_factory=list)  # mlx5_0:1/IB, eth0
    intra: list[str] = field(default_factory=list)  # transport classes between GPUs of this host
    inter: list[str] = field(default_factory=list)  # transport classes over the network
    reason: str = ""  # NCCL's reason for Socket, or for GPUDirect RDMA off
    warnings: list[str] = field(default_factory=list)


class NcclProfile(Struct):
    """Hosts whose NCCL said the same thing (a healthy job has one profile)."""

    hosts: list[str]
    ranks: int
    account: NcclHostAccount  # the first host's, standing for all of them


class NcclDimension(Struct):
    """What carried one mesh dimension's groups, in NCCL's words: `P2P/CUMEM`, `NET/IB/GDRDMA (2 hosts)`."""

    dim: str
    groups: int
    intra_host_groups: int  # groups whose ranks share one host
    transports: list[str] = field(default_factory=list)  # "NET/Socket on host b" where hosts differ


class NcclSummary(Struct):
    """The job's NCCL account for the report: profiles of hosts, each dimension's transports."""

    source: str = ""  # "captured" (preflight set NCCL_DEBUG_FILE), "NCCL_DEBUG_FILE" (the job's own)
    ranks_read: int = 0
    ranks_unavailable: int = 0
    profiles: list[NcclProfile] = field(default_factory=list)
    dims: list[NcclDimension] = field(default_factory=list)
