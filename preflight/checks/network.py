"""Network checks: the interface the job will use, MASTER_ADDR, MTU (RDMA ports: checks/nic_health.py).

Local checks read one rank's `facts.network` (preflight/steps/gather/links.py); cross checks
compare hosts, and read the reachability step's results from `ctx.reachability`
(preflight/steps/tcp_reach.py). A missing section means its gatherer failed, which the runner
reports as RUN005; these checks then stay silent rather than guess.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from preflight.lib.grouping import distinct_networks, first_per_host, odd_ones, ranks_per_host
from preflight.model import NetworkFacts, RankFacts, Severity
from preflight.model.codec import to_builtins
from preflight.registry import CROSS, LOCAL, CheckContext, JobView, Problem, Tags, check

_IFNAME_SOURCES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def _where(facts: RankFacts) -> dict[str, Any]:
    return {"ranks": [facts.rank], "hosts": [facts.host]}


@check(
    "NET001",
    tag=Tags.NETWORK,
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Bring the interface up and give it an address (or point NCCL_SOCKET_IFNAME / "
    "GLOO_SOCKET_IFNAME at one that is); a down link usually means a cable, switch port or driver fault.",
)
def chosen_interface_unusable(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The interface NCCL/Gloo will use on this rank is down, has no address, or there is none.

    The choice: NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME when set (a name matching nothing is
    NCCL008 / NCCL009), else the first UP interface named ib* with an address, else the interface of the
    route to MASTER_ADDR. Sockets bound to a down or unaddressed interface cannot connect.
    """
    chosen = facts.network.chosen_interface
    if chosen is None:
        return
    name = chosen.name
    if not name:
        if chosen.source.startswith(_IFNAME_SOURCES):
            return  # NCCL008 / NCCL009 say which variable matched nothing
        yield Problem(f"no usable interface on {facts.host}: {chosen.source}", **_where(facts),
                      data=to_builtins(chosen))
        return
    faults = [text for bad, text in ((not chosen.up, "is down"), (not chosen.address, "has no address")) if bad]
    if faults:
        yield Problem(f"interface {name} ({chosen.source}) {' and '.join(faults)} on {facts.host}",
                      **_where(facts), data=to_builtins(chosen))


@check(
    "NET003",
    tag=Tags.NETWORK,
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Use an address or a name every host resolves (check /etc/hosts and DNS on the named host), "
    "and make sure the job script really sets it (an empty value is a failed `$(...)`).",
)
def master_addr_unresolved(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """MASTER_ADDR does not resolve on this rank, or is set but empty.

    A name that does not resolve cannot reach the rendezvous (ENV002 compares what it resolves
    to across ranks; this names the ranks where it resolves to nothing at all). An empty
    MASTER_ADDR makes torch's env:// rendezvous raise, even where preflight fell back to a default.
    """
    if facts.env.get("MASTER_ADDR", "unset").strip() == "":
        yield Problem(f"MASTER_ADDR is set but empty on {facts.host} (preflight assumed "
                      f"{facts.world.master_addr}; torch's env:// rendezvous will refuse it)", **_where(facts))
        return
    resolved = facts.network.master_addr
    if resolved and resolved.error:
        yield Problem(f"MASTER_ADDR={resolved.addr} does not resolve on {facts.host}: {resolved.error}",
                      **_where(facts), data=to_builtins(resolved))


def _loopback(network: NetworkFacts, known: dict[tuple[str, ...], bool]) -> bool:
    """Whether every address MASTER_ADDR resolved to in this network section is a loopback one; `known` holds
    the answer per list of addresses (the whole job has one or a few: 131,072 parses cost 0.3 s)."""
    ips = tuple(network.master_addr.ips) if network.master_addr else ()
    found = known.get(ips)
    if found is None:
        try:
            found = bool(ips) and all(ipaddress.ip_address(ip).is_loopback for ip in ips)
        except ValueError:
            found = False
        known[ips] = found
    return found


@check(
    "NET004",
    tag=Tags.NETWORK,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Set MASTER_ADDR to the rendezvous host's routable address or name, never localhost or "
    "127.x when ranks span hosts.",
)
def master_addr_loopback(job: JobView) -> Iterable[Problem]:
    """MASTER_ADDR is a loopback address while the ranks run on several hosts.

    Every host then looks for the rendezvous on itself: the other hosts' ranks either find
    nothing or, worse, another job's store on their own loopback.
    """
    ranks = job.ranks
    known: dict[tuple[str, ...], bool] = {}
    if not any(_loopback(network, known) for network in distinct_networks(ranks)):
        return  # (each host's section read once: every healthy job ends here)
    loopback = [f for f in ranks if _loopback(f.network, known)]
    # Hosts that share one kernel and network namespace (fake nodes of one machine) share loopback.
    scopes = {f.network.loopback_scope or f.host for f in ranks}
    hosts = ranks_per_host(ranks)  # (kept: the job's hosts, counted once for every check)
    if len(hosts) > 1 and len(scopes) > 1 and loopback:
        yield Problem(f"MASTER_ADDR resolves to a loopback address but ranks run on {len(hosts)} hosts",
                      ranks=[f.rank for f in loopback], hosts=sorted({f.host for f in loopback}))


@check(
    "NET006",
    tag=Tags.NETWORK,
    scope=CROSS,
    severity=Severity.WARN,
    hint="Set the same MTU on the chosen interface of every host (and the switch ports between them).",
)
def mtu_differs(job: JobView) -> Iterable[Problem]:
    """The chosen interface's MTU differs across hosts; mismatched MTUs drop or fragment large packets."""
    ranks = job.ranks
    mtus = {host: facts.network.chosen_interface.mtu
            for host, facts in first_per_host(ranks).items() if facts.network.chosen_interface}
    mtus = {h: m for h, m in mtus.items() if m}
    if len(mtus) < 2:
        return
    majority, odd = odd_ones(mtus)
    for host, mtu in sorted(odd.items()):
        yield Problem(f"chosen interface MTU on {host} is {mtu}; most hosts have {majority}",
                      hosts=[host], data={"mtu": mtu, "majority": majority})
