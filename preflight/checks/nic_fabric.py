"""RDMA fabric settings that must agree: RoCE GID type and traffic class, NIC firmware and board.

Reads the ports NCCL would use (checks/nic_health.nccl_ib_ports) with what
preflight/steps/gather/links.py read of them under `--sysfs-root`: a RoCE port's GID types
(`ports/<n>/gid_attrs/types/<index>`) and its device's `hca_type`, `fw_ver` and `board_id`.

Which GID NCCL uses on a RoCE port: NCCL_IB_GID_INDEX when it is set to an index, else NCCL
picks one itself (2.21 and later: a GID of NCCL_IB_ROCE_VERSION_NUM, default 2, with an address of
NCCL_IB_ADDR_FAMILY). RoCE v1 is not routable and every host must put its traffic in the same
class (NCCL_IB_TC) for the switches' lossless (PFC) queue to carry it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from preflight.checks.nic_health import has_rdma_ports, nccl_ib_ports, ports_by_host_group, rdma_ports_somewhere
from preflight.lib.grouping import first_per_host, majority_of, odd_ones
from preflight.model import IbPort, RankFacts, Severity
from preflight.model.health_facts import port_key
from preflight.registry import CROSS, LOCAL, CheckContext, JobView, Problem, Tags, check

ROCE_V2, ROCE_V1 = "RoCE v2", "IB/RoCE v1"
AUTO = "auto"


def roce_ports(facts: RankFacts) -> list[IbPort]:
    """The RoCE (Ethernet link layer) ports NCCL would use on the rank's host."""
    return [p for p in nccl_ib_ports(facts) if p.link_layer == "Ethernet"]


def wanted_type(env: Mapping[str, str]) -> str:
    """The GID type NCCL is asked for: RoCE v2 unless NCCL_IB_ROCE_VERSION_NUM=1."""
    version = env.get("NCCL_IB_ROCE_VERSION_NUM", "").strip()
    return ROCE_V1 if version == "1" else ROCE_V2


def gid_index(facts: RankFacts) -> str:
    """NCCL_IB_GID_INDEX as NCCL reads it: an index, or `auto` (unset, empty or negative)."""
    text = facts.env.get("NCCL_IB_GID_INDEX", "").strip()
    return text if text.isdigit() else AUTO


def gid_in_use(port: IbPort, index: str, wanted: str) -> str:
    """The type of the GID NCCL will use on `port`: the type at `index`, or `wanted` when NCCL picks and one
    exists; "" for an empty GID (or none of the wanted type to pick)."""
    if index == AUTO:
        return wanted if wanted in port.gid_types.values() else ""
    return port.gid_types.get(int(index), "")


@check("NIC005", tag=Tags.NIC, scope=LOCAL, applies=has_rdma_ports, severity=Severity.ERROR, blames_host=True,
       hint="Point NCCL_IB_GID_INDEX at the RoCE v2 GID of the port's IP address (`show_gids`), or unset it and let "
       "NCCL pick; a port without a RoCE v2 GID has no IP address on its netdev: configure one, or drain the host.")
def roce_gid_not_v2(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """A RoCE port NCCL would use has no RoCE v2 GID where NCCL will look: NCCL_IB_GID_INDEX names an empty or a
    RoCE v1 GID, or (NCCL picking) the port has no RoCE v2 GID at all.

    RoCE v1 is not routable across subnets and most fabrics are set up for v2 only: queue pairs
    then fail to connect (NCCL WARN ... ibv_modify_qp failed) or NCCL falls back to sockets.
    """
    index, wanted = gid_index(facts), wanted_type(facts.env)
    for port in roce_ports(facts):
        if not port.gid_types:
            continue  # GID types unreadable here: nothing to judge
        found = gid_in_use(port, index, wanted)
        if found == wanted:
            continue
        key = port_key(port.device, port.port)
        if index == AUTO:
            text = f"has no {wanted} GID for NCCL to pick (GID types: {_types(port)})"
        else:
            text = f"NCCL_IB_GID_INDEX={index} is {found or 'an empty GID'}, want {wanted}"
        yield Problem(f"{key} on {facts.host}: {text}", ranks=[facts.rank], hosts=[facts.host],
                      data={"port": key, "gid_index": index, "gid_type": found, "wanted": wanted})


def _types(port: IbPort) -> str:
    return ", ".join(f"{index}: {kind}" for index, kind in sorted(port.gid_types.items())[:6]) or "none"


def roce_setting(facts: RankFacts) -> str:
    """`NCCL_IB_GID_INDEX=3 (RoCE v2), NCCL_IB_TC=106` for a host's RoCE ports; "" without any."""
    ports = roce_ports(facts)
    if not ports:
        return ""
    index, wanted = gid_index(facts), wanted_type(facts.env)
    kinds = sorted({gid_in_use(p, index, wanted) or "empty GID" for p in ports if p.gid_types}) or ["?"]
    tc = facts.env.get("NCCL_IB_TC", "").strip() or "unset"
    return f"NCCL_IB_GID_INDEX={index if index != AUTO else 'unset'} ({'/'.join(kinds)}), NCCL_IB_TC={tc}"


@check("NIC006", tag=Tags.NIC, scope=CROSS, applies=rdma_ports_somewhere, severity=Severity.ERROR,
       hint="Export one NCCL_IB_GID_INDEX and NCCL_IB_TC for the whole job and give every host the same GID table "
       "(the same addressing on its RoCE netdevs); the switches' lossless class must match NCCL_IB_TC.")
def roce_settings_differ(job: JobView) -> Iterable[Problem]:
    """RoCE settings differ across hosts: the GID index NCCL uses, its type (RoCE v2 / v1), or the traffic class.

    Hosts on another GID type cannot connect queue pairs with the others; traffic in another
    class than its peers' lands outside the lossless (PFC) queue and is dropped under load,
    which shows as retransmissions and a collective far below its peers' speed.
    """
    settings = {host: roce_setting(facts) for host, facts in first_per_host(job.ranks).items()}
    settings = {host: value for host, value in settings.items() if value}
    if len(settings) < 2:
        return
    majority, odd = odd_ones(settings)
    ranks_of: dict[str, list[int]] = defaultdict(list)
    for facts in job.ranks:
        if facts.host in odd:
            ranks_of[facts.host].append(facts.rank)
    for host, value in sorted(odd.items()):
        yield Problem(f"RoCE on {host}: {value}; most hosts: {majority}", hosts=[host], ranks=sorted(ranks_of[host]),
                      data={"setting": value, "majority": majority})


# The variables whose differences across RoCE hosts NIC006 reports, with the GID type each host ends up on.
ROCE_VARIABLES = frozenset({"NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_ROCE_VERSION_NUM"})


def roce_setting_reports(name: str, groups: Mapping[str | None, Sequence[RankFacts]]) -> bool:
    """Whether NIC006 reports the difference of variable `name` (ENV003 then leaves it: one finding per cause):
    a RoCE variable, every rank holding it on a host with RoCE ports, each host of one value (a difference
    between a host's own ranks is only ENV003's), and the hosts' RoCE settings not all alike."""
    if name not in ROCE_VARIABLES:
        return False
    values: dict[str, set[str | None]] = defaultdict(set)
    first: dict[str, RankFacts] = {}
    for value, ranks in groups.items():
        for facts in ranks:
            values[facts.host].add(value)
            first.setdefault(facts.host, facts)
    if any(len(held) > 1 for held in values.values()):
        return False
    settings = {roce_setting(facts) for facts in first.values()}
    return "" not in settings and len(settings) > 1


def _devices(job: JobView) -> dict[str, list[tuple[dict[str, IbPort], list[str]]]]:
    """Model -> for each group of hosts with one list of ports (nic_health.ports_by_host_group): device -> one
    port of that device, and the group's hosts; for the devices NCCL would use."""
    models: dict[str, list[tuple[dict[str, IbPort], list[str]]]] = defaultdict(list)
    for group in ports_by_host_group(job.ranks):
        devices: dict[str, dict[str, IbPort]] = defaultdict(dict)
        for port in group.ports:
            model = port.hca_type or port.device.rstrip("0123456789").rstrip("_")
            devices[model].setdefault(port.device, port)
        for model, ports in devices.items():
            models[model].append((ports, group.hosts))
    return models


@check("NIC007", tag=Tags.NIC, scope=CROSS, applies=rdma_ports_somewhere, severity=Severity.WARN,
       hint="Flash the same firmware (and board image) on every NIC of the model at the next maintenance "
       "(`mlxfwmanager`, the vendor's bundle): firmware drift changes congestion control, RoCE and timeouts per host.")
def nic_firmware_differs(job: JobView) -> Iterable[Problem]:
    """The firmware version (fw_ver) or board id (board_id) of NICs of one model differs across hosts.

    Firmware fixes change congestion control, adaptive routing and error recovery: a job over
    mixed firmware behaves differently per host, and one host's old firmware is a classic cause
    of a slow or flapping rail. A different board id (PSID) is another board variant or OEM image.
    """
    for model, groups in sorted(_devices(job).items()):
        if sum(len(hosts) for _, hosts in groups) < 2:  # (each host is in one group)
            continue
        for what, attribute in (("firmware", "fw_ver"), ("board id", "board_id")):
            # Each (host, device)'s value counted once: a group's ports for each of its hosts.
            counts: Counter[str] = Counter()
            for devices, hosts in groups:
                for port in devices.values():
                    if getattr(port, attribute):
                        counts[getattr(port, attribute)] += len(hosts)
            if counts.total() < 2 or len(counts) < 2:
                continue
            majority = majority_of(counts)
            odd = {(host, device): getattr(port, attribute) for devices, hosts in groups
                   for device, port in devices.items() if getattr(port, attribute) not in ("", majority)
                   for host in hosts}
            by_host: dict[str, list[str]] = defaultdict(list)
            for (host, device), value in sorted(odd.items()):
                by_host[host].append(f"{device} {value}")
            for host, listed in sorted(by_host.items()):
                yield Problem(f"NIC {what} on {host} ({model}): {', '.join(listed)}; most {model} NICs of the job: "
                              f"{majority}", hosts=[host],
                              data={"model": model, "what": attribute, "devices": listed, "majority": majority})
