"""RDMA port health: the InfiniBand / RoCE ports NCCL will use on each host are fit for a long job.

The ports: those NCCL_IB_HCA selects, else every port (NET002: a port that is down is a
missing rail even when NCCL skips it); the counters and GPUDirect checks cover the ports NCCL
would use (`facts.health.nccl_ports`, preflight/steps/gather/nic_health.py). NET002 and NET005
kept their ids when they moved here from checks/network.py. Counters are read at facts time and
again after the probes (preflight/steps/recheck.py): an increase during the run is NIC001.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from preflight.lib.grouping import LastAnswerKept, first_per_host, odd_ones
from preflight.model import IbPort, RankFacts, Severity
from preflight.model.codec import to_builtins
from preflight.model.health_facts import port_key
from preflight.registry import CROSS, LOCAL, CheckContext, JobView, Problem, Tags, check, engine_check

# A counter above this at facts time is a port that has been degrading for a while.
LARGE_COUNT = {"link_downed": 10}
LARGE_COUNT_DEFAULT = 1000


def _where(facts: RankFacts) -> dict[str, Any]:
    return {"ranks": [facts.rank], "hosts": [facts.host]}


NO_RDMA = "no RDMA port"  # the skip reason of the port checks on a host without InfiniBand / RoCE ports


def has_rdma_ports(facts: RankFacts, ctx: CheckContext) -> str | None:
    """The port checks' applicability: without an RDMA port on the host they are skipped."""
    return None if facts.network.ib_ports else NO_RDMA


_IB_PORTS = operator.attrgetter("network.ib_ports")


def rdma_ports_somewhere(job: JobView) -> str | None:
    """NET005 compares ports across hosts: skipped when no host has one."""
    return None if any(map(_IB_PORTS, job.ranks)) else NO_RDMA


def nccl_ib_ports(facts: RankFacts) -> list[IbPort]:
    """The ports NCCL_IB_HCA selects when it is set, else every port of the host."""
    if not facts.health.nccl_ports_source.startswith("NCCL_IB_HCA"):
        return list(facts.network.ib_ports)
    chosen = set(facts.health.nccl_ports)
    return [p for p in facts.network.ib_ports if port_key(p.device, p.port) in chosen]


class PortGroup(NamedTuple):
    """Hosts whose ports NCCL would use are one list: that list, and whether the hosts have any RDMA port."""

    ports: list[IbPort]  # nccl_ib_ports of each host's first rank (read-only: shared by the hosts)
    any_port: bool  # facts.network.ib_ports not empty (NCCL_IB_HCA may select none of them)
    hosts: list[str]  # in the order of their first ranks


@LastAnswerKept
def ports_by_host_group(ranks: Sequence[RankFacts]) -> list[PortGroup]:
    """Each host's ports NCCL would use (nccl_ib_ports of its first rank), the hosts that read the same
    sections grouped: rank 0 decodes a host's ports once for every host that sent them alike (the same
    object), so a job of 16,384 alike hosts is a handful of groups, each judged once (NET005, NIC007).
    Read-only; the last answer is kept."""
    groups: dict[tuple[int, int], PortGroup] = {}
    for host, facts in first_per_host(ranks).items():
        ports, health = facts.network.ib_ports, facts.health
        # The selection's object only where NCCL_IB_HCA selects (both objects alive while `ranks` is).
        key = (id(ports), id(health) if health.nccl_ports_source.startswith("NCCL_IB_HCA") else 0)
        group = groups.get(key)
        if group is None:
            group = groups[key] = PortGroup(nccl_ib_ports(facts), bool(ports), [])
        group.hosts.append(host)
    return list(groups.values())


@check(
    "NET002",
    tag=Tags.NIC,
    scope=LOCAL,
    applies=has_rdma_ports,
    severity=Severity.ERROR,
    hint="Check the port's cable and switch port (`ibstat`, `ibportstate`); a port stuck in INIT "
    "usually means no subnet manager. Reseat or replace the cable; exclude the host if it cannot be fixed now.",
)
def ib_port_not_active(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """An InfiniBand / RoCE port NCCL would use is not ACTIVE with physical state LinkUp.

    NCCL's IB transport uses the ports NCCL_IB_HCA names, else every active port; a port
    that is DOWN, POLLING or INIT either makes NCCL fail when it is selected or leaves the
    host one rail short (less bandwidth than its peers). With NCCL_IB_HCA set, only the ports
    it selects are checked. A link still training (INIT / ARMED, Polling, PortConfigurationTraining)
    is read again for a short grace first: after a reboot every port shows it for a while.
    """
    for port in nccl_ib_ports(facts):
        if port.state == "ACTIVE" and port.phys_state == "LinkUp":
            continue
        waited = f"; still, after reading it again for {port.waited_s:g} s" if port.waited_s else ""
        yield Problem(
            f"{port.device} port {port.port} on {facts.host} is {port.state or '?'} / "
            f"{port.phys_state or '?'} (want ACTIVE / LinkUp{waited})",
            **_where(facts), data=to_builtins(port),
        )


@check(
    "NET005",
    tag=Tags.NIC,
    scope=CROSS,
    applies=rdma_ports_somewhere,
    severity=Severity.WARN,
    hint="A port at a lower rate than its peers is a degraded link (bad cable, wrong speed "
    "negotiated): check `ibstat` on the named host, reseat or replace the cable.",
)
def ib_rates_differ(job: JobView) -> Iterable[Problem]:
    """An RDMA port's rate is below its host's other ports, or port rates differ across hosts.

    The slowest link sets the pace of every collective: one degraded port costs 5-30% of a
    job's throughput.
    """
    groups = ports_by_host_group(job.ranks)
    slow: list[tuple[str, IbPort, float]] = []  # (host, port, its host's best rate), judged once per group
    for group in groups:
        rated = [p for p in group.ports if p.rate_gbps]
        best = max((p.rate_gbps or 0 for p in rated), default=0)
        slower = [p for p in rated if (p.rate_gbps or 0) < best]
        slow += [(host, port, best) for host in group.hosts for port in slower]
    slow.sort(key=operator.itemgetter(0))  # by host, each host's ports in their order (a stable sort)
    for host, port, best in slow:
        yield Problem(f"{port.device} port {port.port} on {host} runs at {port.rate}; the host's other "
                      f"ports run at {best:g} Gb/sec", hosts=[host], data=to_builtins(port))
    rates = {host: rated for group in groups if group.any_port
             for rated in [tuple(sorted(p.rate for p in group.ports))] for host in group.hosts}
    if len(rates) < 2:
        return
    majority, odd = odd_ones(rates)
    for host, value in sorted(odd.items()):
        yield Problem(f"IB port rates on {host} are {', '.join(value)}; most hosts have {', '.join(majority)}",
                      hosts=[host], data={"rates": list(value), "majority": list(majority)})


@engine_check("NIC001", tag=Tags.NIC, severity=Severity.ERROR, blames_host=True,
              hint="The port took errors while the job's own traffic ran: reseat or replace the cable / "
              "transceiver and check the switch port (`ibdiagnet`, `perfquery`); drain the host meanwhile.")
def nic_counters_increased(host: str, ranks: list[int], increases: list[dict[str, Any]]) -> Iterable[Problem]:
    """An RDMA port's error counters increased during the run (between the facts and the end of the probes).

    Symbol errors, link-downed events, receive errors or discards counted while preflight's own
    collectives ran are a link degrading now: the job would see retransmissions, stalls or a
    NCCL timeout on it. `increases`: one dict per port, {"port": "mlx5_0/1", "counters": {name: delta}}.
    """
    for entry in increases:
        deltas = ", ".join(f"{name} +{delta}" for name, delta in sorted(entry["counters"].items()))
        yield Problem(f"{entry['port']} on {host}: error counters increased during the run: {deltas}",
                      ranks=ranks, hosts=[host], data=entry)


@check("NIC002", tag=Tags.NIC, scope=LOCAL, applies=has_rdma_ports, severity=Severity.WARN,
       hint="One degraded port costs 5-30% of a job's throughput: clear the counters (`perfquery -x -R`) and "
       "watch them; if they climb, reseat or replace the cable / transceiver.")
def nic_counters_large(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """An RDMA port NCCL would use shows a large absolute error count (over 1000; link_downed over 10).

    Counters run from the last reset or reboot, so a large count may be old; an increase during
    the run is NIC001.
    """
    for entry in facts.health.ib_counters:
        large = {name: value for name, value in entry.counters.items()
                 if value > LARGE_COUNT.get(name, LARGE_COUNT_DEFAULT)}
        if large:
            text = ", ".join(f"{name} {value}" for name, value in sorted(large.items()))
            yield Problem(f"{port_key(entry.device, entry.port)} on {facts.host} has large error counts: {text}",
                          **_where(facts), data={"port": port_key(entry.device, entry.port), "counters": large})


@check("NIC003", tag=Tags.NIC, scope=LOCAL, applies=has_rdma_ports, severity=Severity.WARN,
       hint="Set every port NCCL uses to one link layer (`mlxconfig ... LINK_TYPE_P1`), or restrict NCCL_IB_HCA "
       "to ports of one kind.")
def link_layer_differs(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """An RDMA port's link layer (InfiniBand vs Ethernet/RoCE) differs from its sibling ports on the host.

    NCCL treats RoCE and IB ports alike but they need different settings (GID index, traffic
    class), and they reach different fabrics.
    """
    chosen = set(facts.health.nccl_ports)
    layers = {port_key(p.device, p.port): p.link_layer for p in facts.network.ib_ports
              if p.link_layer and port_key(p.device, p.port) in chosen}
    if len(layers) < 2:
        return
    majority, odd = odd_ones(layers)
    for port, layer in sorted(odd.items()):
        yield Problem(f"{port} on {facts.host} is {layer}; its sibling ports are {majority}", **_where(facts),
                      data={"port": port, "link_layer": layer, "majority": majority})


def _gdr_requested(value: str) -> bool:
    """NCCL_NET_GDR_LEVEL asks for GPUDirect RDMA: any level but LOC / 0."""
    text = value.strip().upper()
    return bool(text) and text not in ("LOC", "0")


@check("NIC004", tag=Tags.NIC, scope=LOCAL, applies=has_rdma_ports, severity=Severity.WARN,
       hint="Load the nvidia_peermem kernel module (`modprobe nvidia_peermem`) or use a driver and kernel "
       "with dma-buf support; otherwise NCCL stages network traffic through host memory.")
def gdr_unavailable(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NCCL_NET_GDR_LEVEL asks for GPUDirect RDMA, but nvidia_peermem is not loaded on the host.

    Without it (and without dma-buf, which preflight cannot confirm from sysfs) NCCL silently
    copies every network transfer through host memory: lower bandwidth, more CPU.
    """
    level = facts.env.get("NCCL_NET_GDR_LEVEL", "")
    if _gdr_requested(level) and facts.health.nccl_ports and facts.health.peermem is False:
        yield Problem(f"NCCL_NET_GDR_LEVEL={level} but nvidia_peermem is not loaded on {facts.host} "
                      "(dma-buf support not verified)", **_where(facts), data={"level": level})
