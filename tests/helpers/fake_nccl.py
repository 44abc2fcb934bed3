"""A FAKE of NCCL's debug log: what a real NCCL writes for a host's topology and settings.

No NCCL exists on CI machines (the CPU torch wheel has none). This fake writes, for one rank
of one communicator, the INFO/WARN lines NCCL writes while a communicator forms, from NCCL's
own format strings (tests/fixtures/nccl_log/formats.json: each string with its source file,
line and release, read from NVIDIA/nccl by verify_formats.py), for a host described as data
(`NcclHost`: RDMA NICs and their link layer, GPUDirect RDMA, a net plugin, NVLink/P2P, NVLS).
It is as strict as NCCL where preflight could get it wrong:

- NCCL reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE ONCE per process, at its first
  log call: `NcclProcess` freezes them at the first communicator; later changes are ignored;
- NCCL_DEBUG_FILE's %h and %p are expanded, the file is opened with "w" (truncated); without it
  (or when it cannot be opened) the log goes to stdout, as NCCL's does;
- only lines of the enabled subsystems are written (defaults per release: INIT,ENV; from 2.23
  INIT,BOOTSTRAP,ENV), WARN lines at NCCL_DEBUG=WARN or INFO; 2.18-2.21 also print the bare
  version banner on stdout when the log goes to a file;
- the environment decides as NCCL does: NCCL_IB_DISABLE / an NCCL_IB_HCA matching no device /
  no RDMA device -> Socket; NCCL_P2P_DISABLE -> SHM between GPUs of one host.

Used at the boundary where a real NCCL would run: tests/helpers/fake_cuda.py's NCCL
init_process_group calls `NcclProcess.communicator(...)`; tests call `write_log` directly.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO, Any

FORMATS_PATH = Path(__file__).parents[1] / "fixtures" / "nccl_log" / "formats.json"
RELEASES = ("v2.18.3-1", "v2.21.5-1", "v2.26.2-1", "v2.30.7-1")
CUDA = "12.4"

# NCCL's subsystem bits (src/include/nccl_common.h) and each line kind's flags at its call site.
INIT, NET, GRAPH, ENV, P2P, SHM, NVLS, BOOTSTRAP, ALL = "INIT", "NET", "GRAPH", "ENV", "P2P", "SHM", "NVLS", \
    "BOOTSTRAP", "ALL"
SUBSYS = {
    "version": {ALL}, "plugin_absent": {INIT, NET}, "plugin_loaded": {INIT, NET}, "ib_none": {INIT, NET},
    "ib_using": {INIT, NET}, "socket_using": {INIT, NET}, "using_network": {INIT}, "gdr_hca": {NET},
    "gdr_gpu_disabled": {NET}, "env_int": {ENV}, "env_level": {ALL}, "ib_hca": {NET, ENV}, "dmabuf": {INIT},
    "init_start": {INIT}, "comm_info": {INIT}, "p2p_cumem": {INIT, P2P}, "shm": {INIT, SHM},
    "net_send_full": {INIT, NET}, "net_recv_full": {INIT, NET}, "nvls_support": {INIT}, "nvls_comm": {INIT, NVLS},
    "rings": {INIT},
}


@cache
def formats() -> dict[str, dict[str, dict[str, str]]]:
    """NCCL's format strings by release and line kind."""
    return json.loads(FORMATS_PATH.read_text())


def cformat(fmt: str, *args: Any) -> str:
    """C printf of NCCL's format string: length modifiers (l, ll, z) dropped, %p as 0x<hex>."""
    text = re.sub(r"%([-0-9.]*)(?:ll|l|z|h)([dixu])", r"%\1\2", fmt)
    text = text.replace("%zi", "%d").replace("%p", "0x%x").replace("%u", "%d")
    return text % args


@dataclass
class NcclHost:
    """A host as its NCCL sees it: the devices and drivers behind NCCL's choices."""

    hostname: str
    release: str = "v2.26.2-1"
    nics: list[tuple[str, int, str]] = field(default_factory=lambda: [("mlx5_0", 1, "IB")])  # device, port, IB/RoCE
    gdr: bool = True  # nvidia-peermem loaded (or DMA-BUF usable by the NIC): NCCL's HCA GDR support
    dmabuf: bool = True  # the GPU side of DMA-BUF (`DMA-BUF is available on GPU device n`)
    gdr_distance: tuple[int, int] | None = None  # GPU-NIC distance above NCCL_NET_GDR_LEVEL: no GDR
    plugin: str = ""  # a net plugin that loads (its network name: Libfabric, IBext_v8); "" none
    nvlink: bool = True  # GPUs of this host reach each other over P2P (NVLink)
    nvls: bool = False  # NVSwitch multicast (NVLS) available
    socket_if: tuple[str, str] = ("eth0", "10.0.0.1")
    warnings: list[tuple[str, int, str, str]] = field(default_factory=list)  # (file, line, function, text)

    def version(self) -> str:
        return self.release[1:].split("-")[0]


@dataclass
class Comm:
    """One communicator as one of its ranks sees it: its rank, and which host each member is on."""

    rank: int
    hosts: Sequence[str]  # member rank -> host
    device: int = 0  # the CUDA device of this rank
    channels: int = 2
    func: str = "ncclCommInitRankConfig"


@dataclass
class DebugSettings:
    """NCCL_DEBUG / _SUBSYS / _FILE as NCCL read them, once."""

    level: str  # "", VERSION, WARN, INFO
    subsys: set[str]
    out: IO[str]

    @classmethod
    def read(cls, env: Mapping[str, str], release: str, hostname: str, pid: int) -> DebugSettings:
        level = env.get("NCCL_DEBUG", "").upper()
        default = {INIT, ENV} if release < "v2.23" else {INIT, BOOTSTRAP, ENV}
        subsys = default
        if env.get("NCCL_DEBUG_SUBSYS"):
            names = {name.strip().upper() for name in env["NCCL_DEBUG_SUBSYS"].lstrip("^").split(",")}
            subsys = {ALL} if ALL in names else names
        out: IO[str] = sys.stdout
        if env.get("NCCL_DEBUG_FILE") and level:
            path = env["NCCL_DEBUG_FILE"].replace("%h", hostname.split(".")[0]).replace("%p", str(pid))
            try:
                out = open(path, "w", encoding="utf-8")
            except OSError:
                out = sys.stdout
        return cls(level, subsys, out)

    def wants(self, kind: str) -> bool:
        flags = SUBSYS[kind]
        return self.level == "INFO" and (ALL in flags or ALL in self.subsys or bool(flags & self.subsys))


@dataclass
class NcclProcess:
    """One process's NCCL: reads its debug settings at the first communicator, then writes each one's lines."""

    host: NcclHost
    pid: int = field(default_factory=os.getpid)
    tid: int = 0
    settings: DebugSettings | None = None
    network: str | None = None  # chosen by the first communicator's net initialisation

    def communicator(self, comm: Comm, env: Mapping[str, str] | None = None) -> None:
        """Form a communicator: write what NCCL writes for it (debug settings read the first time only)."""
        env = os.environ if env is None else env
        if self.settings is None:
            self.settings = DebugSettings.read(env, self.host.release, self.host.hostname, self.pid)
            if self.settings.level in ("VERSION", "WARN", "INFO") and self.host.release < "v2.22" \
                    and self.settings.out is not sys.stdout:
                print(f"NCCL version {self.host.version()}+cuda{CUDA}", flush=True)  # printf("%s\n", VERSION_STRING)
        self.network = write_log(self.host, comm, env, self.settings, self.pid, self.tid or self.pid, self.network)


def write_log(host: NcclHost, comm: Comm, env: Mapping[str, str], settings: DebugSettings, pid: int, tid: int,
              network: str | None = None) -> str:
    """NCCL's lines for one communicator on one rank, to settings.out; the network used.

    network: what the process's net initialisation chose already (NCCL does it once per
    process); None for the first communicator, which runs it and logs the version banner."""
    table = formats()[host.release]
    writer = _Writer(table, settings, host, pid, tid, comm.device)
    if network is None:
        writer.info("version", f"NCCL version {host.version()}+cuda{CUDA}", raw=True)
        network = _net_init(writer, host, env)
    nranks, me = len(comm.hosts), comm.rank
    local = [r for r in range(nranks) if comm.hosts[r] == comm.hosts[me]]
    nodes = len(dict.fromkeys(comm.hosts))
    commptr, bus = 0x55d0c0de0000 + 0x1000 * me, 0x18000 + 0x1000 * comm.device
    start = (comm.func, commptr, me, nranks, comm.device, comm.device, bus, 0x5EED)
    if "v2.30" in host.release:
        start = (me, *start)
    elif host.release < "v2.26":
        start = start[1:]
    writer.info("init_start", *start)
    if host.dmabuf:
        writer.info("dmabuf", comm.device)
    writer.info("using_network", network)
    if "comm_info" in table:
        writer.info("comm_info", commptr, me, nranks, nodes, len(local), local.index(me), 0)
    for n, nic in enumerate(_nics(host, env) if network == "IB" else [host.socket_if[0]]):
        name = nic[0] if isinstance(nic, tuple) else nic
        writer.info("gdr_hca", network, "Enabled" if host.gdr and network != "Socket" else "Disabled", n, name)
    use_gdr = host.gdr and network != "Socket" and host.gdr_distance is None \
        and env.get("NCCL_NET_GDR_LEVEL", "").upper() != "LOC"
    if host.gdr_distance is not None and "gdr_gpu_disabled" in table:
        writer.info("gdr_gpu_disabled", 0 if "v2.26" in host.release else bus, 0, *host.gdr_distance)
    if env.get("NCCL_NET_GDR_LEVEL"):
        writer.info("env_level", "NCCL_NET_GDR_LEVEL", env["NCCL_NET_GDR_LEVEL"].upper())
    if len(local) > 1:
        writer.info("nvls_support", "" if host.nvls else "not ", comm.device)
    for channel in range(comm.channels):
        _ring_channel(writer, host, comm, env, channel, network, use_gdr)
    if host.nvls and len(local) > 1:
        sizes = (1 << 20, 1 << 21, 1 << 21, 1 << 24)  # buffSize, memSize, nvlsPerRankSize, nvlsTotalSize
        if host.release < "v2.22":
            writer.info("nvls_comm", commptr, 0, len(local), *sizes)
        elif "v2.30" in host.release:
            writer.info("nvls_comm", commptr, 0, len(local), len(local), sizes[0], *sizes[2:])
        else:
            writer.info("nvls_comm", commptr, 0, len(local), sizes[0], *sizes[2:])
    writer.info("rings", *(() if host.release < "v2.24" else (0, int(use_gdr))))
    for file, line, func, text in host.warnings:
        writer.warn(file, line, func, text)
    settings.out.flush()
    return network


def _nics(host: NcclHost, env: Mapping[str, str]) -> list[tuple[str, int, str]]:
    wanted = env.get("NCCL_IB_HCA", "")
    if not wanted:
        return host.nics
    prefixes = [p.strip().lstrip("^=").split(":")[0] for p in wanted.split(",") if p.strip()]
    return [nic for nic in host.nics if any(nic[0].startswith(p) for p in prefixes)]


def _net_init(writer: _Writer, host: NcclHost, env: Mapping[str, str]) -> str:
    """NCCL's net initialisation: plugin, then IB, then Socket; the network's name."""
    if host.plugin:
        writer.info("plugin_loaded_v", host.plugin)
        return host.plugin
    release = host.release
    if release.startswith("v2.18"):
        writer.info("plugin_absent")
    elif release.startswith("v2.21"):
        writer.info("plugin_absent", "libnccl-net.so")
    elif release.startswith("v2.26"):
        writer.info("plugin_absent", "NET", " libnccl-net.so", writer.table["plugin_fallback"]["format"])
    else:
        writer.info("plugin_absent", "NET", " libnccl-net.so", "", "")
    disabled = env.get("NCCL_IB_DISABLE", "0") not in ("0", "")
    if disabled:
        writer.info("env_int", "NCCL_IB_DISABLE", int(env["NCCL_IB_DISABLE"]))
    elif env.get("NCCL_NET", "").lower() != "socket":
        if env.get("NCCL_IB_HCA"):
            writer.info("ib_hca", env["NCCL_IB_HCA"])
        nics = _nics(host, env)
        if nics:
            item = writer.table["ib_item"]["format"]
            layer = writer.table.get("ib_item_layer", {}).get("format")
            line = "".join(cformat(item, i, dev, port) + cformat(layer, ll) if layer else
                           cformat(item, i, dev, port, ll) for i, (dev, port, ll) in enumerate(nics))
            writer.info("ib_using", line, "[RO]", "ib0", f"{host.socket_if[1]}<0>")
            return "IB"
        writer.info("ib_none")
    item = cformat(writer.table["socket_item"]["format"], 0, host.socket_if[0], f"{host.socket_if[1]}<0>")
    writer.info("socket_using", item)
    return "Socket"


def _ring_channel(writer: _Writer, host: NcclHost, comm: Comm, env: Mapping[str, str], channel: int,
                  network: str, use_gdr: bool) -> None:
    """One ring channel: send to the next rank, receive from the previous, as NCCL prints them."""
    nranks, me = len(comm.hosts), comm.rank
    if nranks < 2:
        return
    nxt, prev = (me + 1) % nranks, (me - 1) % nranks
    dev = comm.device
    if comm.hosts[nxt] == comm.hosts[me]:  # NCCL logs the send side of P2P and SHM
        p2p = host.nvlink and env.get("NCCL_P2P_DISABLE", "0") in ("0", "")
        if p2p and host.release.startswith("v2.18"):
            writer.info("p2p_cumem", channel, 0, me, dev, nxt, dev + 1, "", "")
        elif p2p:
            writer.info("p2p_cumem", channel, 0, me, dev, nxt, dev + 1, "CUMEM", "", "")
        elif "v2.30" in host.release:
            writer.info("shm", channel, me, dev, nxt, dev + 1)
        else:
            writer.info("shm", channel, me, dev, nxt, dev + 1, "direct", "direct")
    # `%s%s[%s]` after the NIC: /GDRDMA, (2.26+) the (PCI) GDR mode, /Shared
    suffix = ("/GDRDMA" if use_gdr else "", "", "") if host.release >= "v2.26" else ("/GDRDMA" if use_gdr else "", "")
    nic = dev % max(1, len(_nics(host, env))) if network == "IB" else 0  # each GPU's nearest NIC
    if comm.hosts[nxt] != comm.hosts[me]:
        writer.info("net_send_full", channel, 0, me, dev, nxt, 0, network, nic, *suffix)
    if comm.hosts[prev] != comm.hosts[me]:
        writer.info("net_recv_full", channel, 0, prev, 0, me, dev, network, nic, *suffix)


@dataclass
class _Writer:
    table: dict[str, dict[str, str]]
    settings: DebugSettings
    host: NcclHost
    pid: int
    tid: int
    device: int

    def info(self, kind: str, *args: Any, raw: bool = False) -> None:
        """One INFO line of this kind (`plugin_loaded_v`: the plugin line with NCCL's API version)."""
        if kind == "plugin_loaded_v":
            kind, message = "plugin_loaded", self.table["plugin_loaded"]["format"] % args[0] + "8)"
        elif raw:
            message = args[0]
        else:
            message = cformat(self.table[kind]["format"], *args)
        if not self.settings.wants(kind):
            return
        prefix = self.table["info_prefix"]["format"]
        host = cformat(self.table["info_host"]["format"], self.host.hostname, self.pid, self.tid) \
            if "info_host" in self.table else ""
        if prefix.endswith("%s\n"):
            self.settings.out.write(host + cformat(prefix, self.device, message))
        elif host:
            self.settings.out.write(host + cformat(prefix, self.device) + message + "\n")
        else:
            self.settings.out.write(cformat(prefix, self.host.hostname, self.pid, self.tid, self.device) + message
                                    + "\n")

    def warn(self, file: str, line: int, func: str, message: str) -> None:
        """One WARN line (written at NCCL_DEBUG=WARN and INFO; 2.26+ stamp WARN lines by default)."""
        if self.settings.level not in ("WARN", "INFO"):
            return
        prefix = self.table["warn_prefix"]["format"]
        out = self.settings.out
        if "warn_timestamp" in self.table:
            stamp = time.strftime(self.table["warn_timestamp"]["format"].replace("%F", "%Y-%m-%d")
                                  .replace("%T", "%H:%M:%S"))
            host = cformat(self.table["info_host"]["format"], self.host.hostname, self.pid, self.tid)
            if prefix.endswith("%s\n"):
                out.write(stamp + host + cformat(prefix, self.device, file, line, func, message))
            else:
                out.write(stamp + host + cformat(prefix, self.device, file, line) + message + "\n")
        else:
            out.write(cformat(prefix, self.host.hostname, self.pid, self.tid, self.device, file, line) + message + "\n")
