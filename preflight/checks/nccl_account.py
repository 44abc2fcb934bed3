"""What NCCL chose, judged against the hardware: NCCL020-NCCL025 (issue 42).

Engine checks over every rank's NcclAccount (model/nccl_account.py, parsed from NCCL's own log
by lib/nccl_log.py), run by rank 0 after the probes and by `preflight nccl-log`. Each finding
names the rank, host and NIC and quotes the cause NCCL gave. `NcclJob` carries what the run
knows of the hardware (active RDMA ports, NVLink, NVSwitch, GPU models per host); `preflight
nccl-log` has none of it, so there the evidence is the other hosts of the same log (a host on
Socket while others use IB).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from preflight.lib.nccl_log import network_reason
from preflight.lib.nccl_summary import by_host
from preflight.model import Severity
from preflight.model.nccl_account import NcclAccount
from preflight.registry import Grade, Problem, Tags, engine_check

RDMA_NETWORKS_SOCKET = "Socket"
# GPUs that do GPUDirect RDMA with a ConnectX/EFA NIC when nvidia-peermem or DMA-BUF is there.
GDR_CAPABLE = ("A100", "A800", "H100", "H800", "H200", "H20", "B100", "B200", "B300", "GB200", "GB300", "L40",
               "A40", "A30", "RTX 6000")
NVSWITCH_LINKS = 18  # an H100/H200 SXM on an NVSwitch baseboard has 18 active NVLinks (NVLS needs it)


@dataclass
class NcclJob:
    """Every rank's account and what the run knows of each host's hardware ({} in `preflight nccl-log`).

    Ranks whose NCCL said the same may share one account object (channel/board.fetch_interned):
    a rank's host is `hosts[rank]` (else its account's own `host`), its rank the key."""

    accounts: dict[int, NcclAccount]
    hosts: dict[int, str] = field(default_factory=dict)  # rank -> host
    rdma_ports: dict[str, list[str]] = field(default_factory=dict)  # host -> its ACTIVE RDMA ports (mlx5_0:1)
    nvlink_hosts: set[str] = field(default_factory=set)  # hosts whose GPUs have active NVLinks
    nvswitch_hosts: set[str] = field(default_factory=set)  # hosts with NVSwitch-attached GPUs (NVLS expected)
    gpu_models: dict[str, str] = field(default_factory=dict)  # host -> its GPU name
    peermem: dict[str, bool] = field(default_factory=dict)  # host -> nvidia_peermem loaded (sysfs), where known
    strict_bandwidth: bool = False
    _hosts: dict[str, tuple[list[int], dict[int, NcclAccount]]] | None = field(default=None, repr=False)
    _distinct: dict[str, list[NcclAccount]] | None = field(default=None, repr=False)
    _kinds: list[tuple[list[NcclAccount], list[str]]] | None = field(default=None, repr=False)

    def host_of(self, rank: int) -> str:
        """The rank's host."""
        return self.hosts.get(rank) or self.accounts[rank].host

    def by_host(self) -> dict[str, list[NcclAccount]]:
        """Each host's distinct account objects (its ranks share them), hosts in rank order, made once:
        a check asks these before it looks at a host's ranks (`members`), so a host whose ranks all
        said what the check accepts costs no pass over its ranks (131,072 on rank 0)."""
        if self._distinct is None:
            self._distinct = {host: list(distinct.values()) for host, (_, distinct) in self._grouped().items()}
        return self._distinct

    def kinds(self) -> list[tuple[list[NcclAccount], list[str]]]:
        """Each distinct set of account objects that hosts said, with its hosts (in host order), made once:
        hosts whose ranks said the same share one (16,384 hosts, a handful of kinds), so a check judges
        each kind once, not each host."""
        if self._kinds is None:
            kinds: dict[tuple[int, ...], tuple[list[NcclAccount], list[str]]] = {}
            for host, (_, distinct) in self._grouped().items():
                kind = kinds.get(key := tuple(distinct))
                if kind is None:
                    kinds[key] = (list(distinct.values()), [host])
                else:
                    kind[1].append(host)
            self._kinds = list(kinds.values())
        return self._kinds

    def hosts_where(self, test: Callable[[list[NcclAccount]], bool]) -> list[str]:
        """The hosts whose distinct accounts pass `test` (asked once per kind), in host order."""
        chosen = [hosts for said, hosts in self.kinds() if test(said)]
        if len(chosen) <= 1:
            return list(chosen[0]) if chosen else []
        picked = {host for hosts in chosen for host in hosts}
        return [host for host in self._grouped() if host in picked]

    def members(self, host: str) -> list[tuple[int, NcclAccount]]:
        """(rank, account) of one host, in rank order."""
        return [(rank, self.accounts[rank]) for rank in self._grouped()[host][0]]

    def _grouped(self) -> dict[str, tuple[list[int], dict[int, NcclAccount]]]:
        if self._hosts is None:
            self._hosts = by_host(self.accounts, self.hosts)
        return self._hosts


Member = tuple[int, NcclAccount]


def _ranks(members: Iterable[Member]) -> list[int]:
    return sorted(rank for rank, _ in members if rank >= 0)


def _on_network(account: NcclAccount) -> bool:
    """This process sent over the network (NET/ channels), or its job spans hosts."""
    return bool(account.inter) or account.nnodes > 1


def _rdma(network: str) -> bool:
    return bool(network) and network != RDMA_NETWORKS_SOCKET


@engine_check(
    "NCCL020",
    tag=Tags.NCCL,
    severity=Severity.ERROR,
    blames_host=True,
    hint="Make NCCL use the fabric: unset NCCL_IB_DISABLE / NCCL_NET=Socket, fix NCCL_IB_HCA, expose "
    "/dev/infiniband to the container (--device or the RDMA device plugin), install the net plugin; then "
    "`preflight nccl-log` on the new log should say `network IB` (or the plugin's name).",
)
def socket_despite_rdma(job: NcclJob) -> Iterable[Problem]:
    """NCCL sends inter-host traffic over TCP sockets on a host that has RDMA.

    NCCL tries its net plugin, then InfiniBand/RoCE, then falls back to sockets without an
    error: collectives then run at a fraction of the fabric's bandwidth. The evidence that the
    host has RDMA is its active InfiniBand/RoCE ports (sysfs, in a run) or, reading logs alone,
    other hosts of the same job using an RDMA network. The finding quotes NCCL's reason: the
    plugin that did not load, `NET/IB : No device found.`, NCCL_IB_HCA, NCCL_IB_DISABLE.
    """
    rdma_elsewhere = sorted({a.network for said, _ in job.kinds() for a in said if _rdma(a.network)})
    for host in job.hosts_where(lambda said: any(a.network == RDMA_NETWORKS_SOCKET and _on_network(a)
                                                 for a in said)):
        socket = [(r, a) for r, a in job.members(host) if a.network == RDMA_NETWORKS_SOCKET and _on_network(a)]
        ports = job.rdma_ports.get(host, [])
        if not socket or not (ports or rdma_elsewhere):
            continue
        first = socket[0][1]
        used = ", ".join(n.device for n in first.nics) or "?"
        evidence = (f"its active RDMA port(s) {', '.join(ports[:4])}" if ports
                    else f"other hosts of this job use {', '.join(rdma_elsewhere)}")
        reason = network_reason(first)
        yield Problem(f"host {host}: NCCL sends inter-host traffic over sockets (NET/Socket on {used}) on "
                      f"{len(socket)} rank(s) although {evidence}; NCCL's reason: {reason}",
                      ranks=_ranks(socket), hosts=[host],
                      data={"network": "Socket", "socket_nics": [n.device for n in first.nics], "rdma_ports": ports,
                            "reason": reason, "plugin": first.plugin.name or first.plugin.why})


@engine_check(
    "NCCL021",
    tag=Tags.NCCL,
    severity=Severity.ERROR,
    blames_host=True,
    hint="Load nvidia-peermem (`modprobe nvidia_peermem`; on kernels >= 5.12 with open GPU driver DMA-BUF "
    "works without it), check NCCL_NET_GDR_LEVEL, and keep GPU and NIC under one PCIe switch.",
)
def gdr_off(job: NcclJob) -> Iterable[Problem]:
    """GPUDirect RDMA is off on some hosts while on elsewhere, or off where GPU and NIC support it.

    Without GPUDirect RDMA every network transfer is staged through host memory: a 2-node
    all-reduce drops from ~180 to ~10 GB/s (NVIDIA/nccl#1676) and nothing fails. The usual
    cause is nvidia-peermem not loaded (renamed, or a driver update), DMA-BUF unavailable, an
    NCCL_NET_GDR_LEVEL that forbids it, or a GPU too far from its NIC on the PCIe tree. The
    reason is the one NCCL's log gives (its HCA line, its distance line, the variable it read).
    """
    on_somewhere = sorted(h for said, hosts in job.kinds() if any(a.gdr for a in said) for h in hosts)
    for host in job.hosts_where(lambda said: any(a.gdr is False and _rdma(a.network) and _on_network(a)
                                                 for a in said)):
        off = [(r, a) for r, a in job.members(host) if a.gdr is False and _rdma(a.network) and _on_network(a)]
        if not off:
            continue
        model = job.gpu_models.get(host, "")
        capable = any(name in model for name in GDR_CAPABLE)
        if not on_somewhere and not capable:
            continue
        first = off[0][1]
        nics = ", ".join(f"{n.device}:{n.port}/{n.link_layer}" if n.port is not None else n.device
                         for n in first.nics) or "?"
        why = (f"while on at {', '.join(on_somewhere[:3])}" + (" ..." if len(on_somewhere) > 3 else "")
               if on_somewhere else f"although its {model} and NICs support it")
        module = {False: "; nvidia_peermem is not loaded there (sysfs)", True: "; nvidia_peermem is loaded there",
                  None: ""}[job.peermem.get(host)]
        yield Problem(f"host {host}: GPUDirect RDMA is off on {len(off)} rank(s) (NET/{first.network} on {nics}) "
                      f"{why}; NCCL's reason: {first.gdr_reason}{module}",
                      ranks=_ranks(off), hosts=[host],
                      data={"gdr": False, "reason": first.gdr_reason, "nics": nics, "gdr_hosts": on_somewhere[:16]})


@engine_check(
    "NCCL022",
    tag=Tags.NCCL,
    severity=Severity.WARN,
    grades=(Grade(Severity.ERROR, "--strict-bandwidth is given"),),
    blames_host=True,
    hint="Unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, disable PCIe ACS on the host, run the container with "
    "--ipc=host (CUDA IPC), and check `nvidia-smi topo -m`; --strict-bandwidth makes this an error.",
)
def intra_host_not_p2p(job: NcclJob) -> Iterable[Problem]:
    """GPUs of one host talk through SHM or the network instead of P2P/NVLink, where the host has NVLink.

    NCCL picks P2P (NVLink, or PCIe peer access) between GPUs of one host; it falls back to
    host shared memory (SHM) or even the NIC when P2P is disabled (NCCL_P2P_DISABLE), blocked
    (PCIe ACS, a container without IPC) or the GPUs cannot map each other. On a host with
    NVLink that costs most of the intra-host bandwidth (tensor parallelism lives there).
    Evidence of NVLink: the GPUs' active NVLinks (NVML, in a run) or, reading logs alone,
    other hosts of the job connecting their GPUs over P2P.
    """
    p2p_elsewhere = any(n.startswith("P2P") for said, _ in job.kinds() for a in said for n in a.intra)
    for host in job.hosts_where(lambda said: any(not n.startswith("P2P") for a in said for n in a.intra)):
        slow = [(r, a) for r, a in job.members(host) if any(not n.startswith("P2P") for n in a.intra)]
        if not slow or not (host in job.nvlink_hosts or p2p_elsewhere):
            continue
        used = sorted({n for _, a in slow for n in a.intra_transports() if not n.startswith("P2P") and n != "NVLS"})
        evidence = "its GPUs have active NVLinks" if host in job.nvlink_hosts else "other hosts' GPUs use P2P"
        yield Problem(f"host {host}: intra-host GPU pairs go over {', '.join(used)} on {len(slow)} rank(s), not "
                      f"P2P/NVLink, although {evidence}",
                      ranks=_ranks(slow), hosts=[host],
                      severity=Severity.ERROR if job.strict_bandwidth else None,
                      data={"intra": used,
                            "env": [e for _, a in slow[:1] for e in a.env_lines if "P2P" in e or "SHM" in e]})


@engine_check(
    "NCCL023",
    tag=Tags.NCCL,
    severity=Severity.WARN,
    hint="NVLS needs the NVSwitch fabric manager running, CUDA driver >= 530 with multicast, NCCL >= 2.17 and "
    "NCCL_NVLS_ENABLE unset; check `nvidia-smi -q | grep -i fabric` on the host.",
)
def nvls_unused(job: NcclJob) -> Iterable[Problem]:
    """NVLS (NVLink SHARP) expected on an NVSwitch system but not used.

    On NVSwitch systems (H100/H200/B200 SXM) NCCL offloads all-reduce to the switches
    (NVLS) when the fabric supports multicast. NCCL says `NVLS multicast support is not
    available` when the fabric manager is down, the driver lacks multicast or
    NCCL_NVLS_ENABLE=0; intra-host all-reduce then loses up to a third of its bandwidth.
    """
    for host in job.hosts_where(lambda said: not all(a.nvls_used for a in said)):
        if host not in job.nvswitch_hosts:
            continue
        group = job.members(host)
        several = [(r, a) for r, a in group if a.local_ranks > 1 or len(group) > 1]
        unused = [(r, a) for r, a in several if not a.nvls_used]
        if not unused:
            continue
        said = ("NCCL: NVLS multicast support is not available" if any(a.nvls_available is False for _, a in unused)
                else "no NVLS communicator was set up")
        yield Problem(f"host {host}: NVLS unused on {len(unused)} rank(s) of an NVSwitch system ({said})",
                      ranks=_ranks(unused), hosts=[host], data={"nvls_available": unused[0][1].nvls_available})


@engine_check(
    "NCCL024",
    tag=Tags.NCCL,
    severity=Severity.ERROR,
    grades=(Grade(Severity.WARN, "the ranks differ in net plugin or network, not in NCCL version"),),
    hint="Run one container image on every host: the same NCCL (and net plugin) everywhere; a host whose NCCL "
    "differs is the one whose image or LD_LIBRARY_PATH differs.",
)
def ranks_disagree(job: NcclJob) -> Iterable[Problem]:
    """Ranks disagree on the NCCL version (error), the net plugin or the network (warning).

    Ranks on different NCCL versions may hang or fail at the first collective (NCCL 2.23+ says
    `Mismatched NCCL version detected`; older ones fail later, e.g. `connecting to address
    with family 0`). A plugin or network that differs between hosts makes the whole job run at
    the slowest transport. The odd ones out are named against the majority.
    """
    values = list(job.accounts.values())
    shared = Counter(map(id, values))  # ranks share accounts: each read once
    objects = dict(zip(map(id, values), values))
    for what, value, severity in (("NCCL version", lambda a: a.nccl_version, Severity.ERROR),
                                  ("net plugin", lambda a: a.plugin.name if a.plugin.loaded else "none",
                                   Severity.WARN),
                                  ("network", lambda a: a.network, Severity.WARN)):
        said = {key: value(account) for key, account in objects.items()}
        seen: Counter[str] = Counter()
        for key, count in shared.items():
            if said[key]:
                seen[said[key]] += count
        if len(seen) < 2:
            continue
        majority = seen.most_common(1)[0][0]
        odd_ids = {key for key, text in said.items() if text and text != majority}
        # the odd ranks of the hosts whose distinct accounts include an odd one (no pass over every rank)
        odd_hosts = job.hosts_where(lambda said: any(id(a) in odd_ids for a in said))  # noqa: B023 (asked now)
        odd = [(r, a) for host in odd_hosts for r, a in job.members(host) if id(a) in odd_ids]
        hosts = sorted(odd_hosts)
        yield Problem(f"ranks disagree on the {what}: {len(odd)} rank(s) on {', '.join(hosts[:4])}"
                      f"{' ...' if len(hosts) > 4 else ''} use {', '.join(sorted({said[id(a)] for _, a in odd}))}, "
                      f"the other {len(job.accounts) - len(odd)} {majority}",
                      ranks=_ranks(odd), hosts=hosts, severity=severity,
                      data={"what": what, "majority": majority, "values": dict(seen)})


@engine_check(
    "NCCL025",
    tag=Tags.NCCL,
    severity=Severity.INFO,
    hint="Set NCCL_DEBUG=INFO and NCCL_DEBUG_FILE=/some/dir/nccl.%h.%p.log in the job's environment (before its "
    "first communicator); preflight then reads NCCL's account from that file.",
)
def account_unavailable(why: str, ranks: list[int]) -> Iterable[Problem]:
    """NCCL's account of its choices is not available for these ranks (not a pass).

    Inside a trainer (`preflight.check`) NCCL fixed its logging when the trainer created its
    first communicator, so preflight can read NCCL's account only from the trainer's own
    NCCL_DEBUG_FILE; without it NCCL020-NCCL024 cannot run. Also raised when NCCL's log could
    not be read (not written, empty, no NCCL lines).
    """
    yield Problem(f"NCCL's account (network, GPUDirect RDMA, transports) is unavailable on {len(ranks)} rank(s): "
                  f"{why}", ranks=ranks[:64], data={"why": why, "count": len(ranks)})


ACCOUNT_CHECKS = (socket_despite_rdma, gdr_off, intra_host_not_p2p, nvls_unused, ranks_disagree)
