"""Network checks: the interface the job will use, InfiniBand ports, MASTER_ADDR, reachability.

Local checks read one rank's `facts.network` (preflight/facts/network.py); cross checks
compare hosts, and read the reachability results rank 0 stored in `facts.extra`
(preflight/reachability.py). A missing section means its gatherer failed, which the runner
reports as RUN005; these checks then stay silent rather than guess.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from preflight.model import RankFacts, Severity
from preflight.registry import CROSS, LOCAL, CheckContext, Problem, check


def _where(facts: RankFacts) -> dict[str, Any]:
    return {"ranks": [facts.rank], "hosts": [facts.host]}


def _interface_names(facts: RankFacts) -> list[str]:
    return [i.get("name", "") for i in facts.network.get("interfaces", [])]


@check(
    "NET001",
    tag="network",
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Set NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME to an interface every host has (see `ip -br link` "
    "on the named host), or unset it to let the library choose.",
)
def socket_ifname_missing(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME selects no interface on this host.

    Gloo fails at process-group creation ("Unable to find address for: X"); NCCL finds no
    socket interface and aborts its bootstrap. Gloo takes exact names (every name listed must
    exist); NCCL takes prefixes, `=` for exact names and `^` to exclude.
    """
    names = _interface_names(facts)
    for variable, entry in sorted(facts.network.get("socket_ifnames", {}).items()):
        spec, matches = entry.get("spec", ""), entry.get("matches", [])
        wanted = [e for e in entry.get("entries", []) if e]
        missing = [e for e in wanted if e not in names] if variable == "GLOO_SOCKET_IFNAME" else []
        if matches and not missing:
            continue
        what = f"names {', '.join(missing)}, which does not exist" if matches else "selects no interface"
        yield Problem(
            f"{variable}={spec} {what} on {facts.host} (interfaces: {', '.join(names) or 'none'})",
            **_where(facts), data={"variable": variable, "spec": spec, "interfaces": names},
        )


@check(
    "NET002",
    tag="network",
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Bring the interface up and give it an address (or point NCCL_SOCKET_IFNAME / "
    "GLOO_SOCKET_IFNAME at one that is); a down link usually means a cable, switch port or driver fault.",
)
def chosen_interface_unusable(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The interface NCCL/Gloo will use on this rank is down, has no address, or there is none.

    The choice: NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME when set (a name matching nothing is
    NET001), else the first UP interface named ib* with an address, else the interface of the
    route to MASTER_ADDR. Sockets bound to a down or unaddressed interface cannot connect.
    """
    chosen = facts.network.get("chosen_interface")
    if not chosen:
        return
    name = chosen.get("name", "")
    if not name:
        if facts.network.get("socket_ifnames"):
            return  # NET001 says which variable matched nothing
        yield Problem(f"no usable interface on {facts.host}: {chosen.get('source', '')}", **_where(facts),
                      data=dict(chosen))
        return
    faults = [text for bad, text in ((not chosen.get("up"), "is down"),
                                     (not chosen.get("address"), "has no address")) if bad]
    if faults:
        yield Problem(f"interface {name} ({chosen.get('source', '')}) {' and '.join(faults)} on {facts.host}",
                      **_where(facts), data=dict(chosen))


@check(
    "NET003",
    tag="network",
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Check the port's cable and switch port (`ibstat`, `ibportstate`); a port stuck in INIT "
    "usually means no subnet manager. Exclude the host if it cannot be fixed now.",
)
def ib_port_not_active(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """An InfiniBand / RoCE port is present but not ACTIVE with physical state LinkUp.

    NCCL's IB transport uses every active port it finds (or those NCCL_IB_HCA names); a port
    that is DOWN, POLLING or INIT either makes NCCL fall back to slower paths or fail when it
    is the one selected.
    """
    for port in facts.network.get("ib_devices", []):
        if port.get("state") == "ACTIVE" and port.get("phys_state") == "LinkUp":
            continue
        yield Problem(
            f"{port.get('device')} port {port.get('port')} on {facts.host} is {port.get('state') or '?'} / "
            f"{port.get('phys_state') or '?'} (want ACTIVE / LinkUp)",
            **_where(facts), data=dict(port),
        )


@check(
    "NET004",
    tag="network",
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Remove the empty entry (a doubled or trailing comma): NCCL treats an empty prefix as "
    "matching every interface, docker0 and lo included.",
)
def socket_ifname_empty_entry(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME has an empty entry (`ib0,,eth0`, `ib0,`, `^`)."""
    for variable, entry in sorted(facts.network.get("socket_ifnames", {}).items()):
        if any(not e for e in entry.get("entries", [])):
            yield Problem(f"{variable}={entry.get('spec', '')!r} has an empty entry", **_where(facts),
                          data={"variable": variable, "spec": entry.get("spec", "")})


@check(
    "NET005",
    tag="network",
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Use an address or a name every host resolves (check /etc/hosts and DNS on the named host).",
)
def master_addr_unresolved(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """MASTER_ADDR does not resolve on this rank, or is set but empty.

    A name that does not resolve cannot reach the rendezvous. An empty MASTER_ADDR (often a
    failed `$(...)` in the job script) makes torch's env:// rendezvous raise, even where
    preflight could fall back to a default.
    """
    master = facts.network.get("master_addr")
    if master and master.get("set_empty"):
        yield Problem(f"MASTER_ADDR is set but empty on {facts.host} (preflight assumed {master.get('name')}; "
                      "torch's env:// rendezvous will refuse it)", **_where(facts), data=dict(master))
    elif master and not master.get("addresses"):
        yield Problem(f"MASTER_ADDR={master.get('name')} does not resolve on {facts.host}: {master.get('error')}",
                      **_where(facts), data=dict(master))


def _by_host(ranks: Sequence[RankFacts]) -> dict[str, RankFacts]:
    """One rank's facts per host (the lowest rank): hosts share interfaces and ports."""
    chosen: dict[str, RankFacts] = {}
    for facts in sorted(ranks, key=lambda f: f.rank):
        chosen.setdefault(facts.host, facts)
    return chosen


@check(
    "NET006",
    tag="network",
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Set MASTER_ADDR to the rendezvous host's routable address or a name every host resolves "
    "the same way, never localhost when ranks span hosts.",
)
def master_addr_disagrees(ranks: Sequence[RankFacts], ctx: CheckContext) -> Iterable[Problem]:
    """MASTER_ADDR resolves to different addresses on different ranks, or to loopback across hosts.

    Ranks that resolve the rendezvous name differently (split DNS, stale /etc/hosts) connect
    to different machines; a loopback MASTER_ADDR in a multi-host job makes every host talk to
    itself.
    """
    resolved: dict[tuple[str, ...], list[RankFacts]] = defaultdict(list)
    for facts in ranks:
        master = facts.network.get("master_addr")
        if master and master.get("addresses"):
            resolved[tuple(master["addresses"])].append(facts)
    if len(resolved) > 1:
        majority = max(resolved, key=lambda k: len(resolved[k]))
        for addresses, odd in sorted(resolved.items()):
            if addresses != majority:
                yield Problem(
                    f"MASTER_ADDR resolves to {', '.join(addresses)} on {', '.join(sorted({f.host for f in odd}))} "
                    f"but to {', '.join(majority)} on {len(resolved[majority])} other rank(s)",
                    ranks=[f.rank for f in odd], hosts=[f.host for f in odd],
                    data={"addresses": list(addresses), "majority": list(majority)})
    hosts = {f.host for f in ranks}
    loopback = [f for f in ranks if (f.network.get("master_addr") or {}).get("loopback")]
    if len(hosts) > 1 and loopback:
        yield Problem(f"MASTER_ADDR is a loopback address but ranks run on {len(hosts)} hosts",
                      ranks=[f.rank for f in loopback], hosts=sorted({f.host for f in loopback}))


def _odd_ones(values: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The most common value and the hosts that differ from it."""
    counts: dict[Any, int] = defaultdict(int)
    for value in values.values():
        counts[value] += 1
    majority = max(counts, key=lambda v: (counts[v], str(v)))
    return majority, {host: v for host, v in values.items() if v != majority}


@check(
    "NET007",
    tag="network",
    scope=CROSS,
    severity=Severity.WARN,
    hint="A port at a lower rate than its peers is a degraded link (bad cable, wrong speed "
    "negotiated): check `ibstat` on the named host.",
)
def ib_rates_differ(ranks: Sequence[RankFacts], ctx: CheckContext) -> Iterable[Problem]:
    """InfiniBand port rates differ across hosts; the slowest link sets the pace of every collective."""
    rates = {host: tuple(sorted(str(p.get("rate", "")) for p in facts.network.get("ib_devices", [])))
             for host, facts in _by_host(ranks).items() if facts.network.get("ib_devices")}
    if len(rates) < 2:
        return
    majority, odd = _odd_ones(rates)
    for host, value in sorted(odd.items()):
        yield Problem(f"IB port rates on {host} are {', '.join(value)}; most hosts have {', '.join(majority)}",
                      hosts=[host], data={"rates": list(value), "majority": list(majority)})


@check(
    "NET008",
    tag="network",
    scope=CROSS,
    severity=Severity.WARN,
    hint="Set the same MTU on the chosen interface of every host (and the switch ports between them).",
)
def mtu_differs(ranks: Sequence[RankFacts], ctx: CheckContext) -> Iterable[Problem]:
    """The chosen interface's MTU differs across hosts; mismatched MTUs drop or fragment large packets."""
    mtus = {host: (facts.network.get("chosen_interface") or {}).get("mtu")
            for host, facts in _by_host(ranks).items()}
    mtus = {h: m for h, m in mtus.items() if m}
    if len(mtus) < 2:
        return
    majority, odd = _odd_ones(mtus)
    for host, mtu in sorted(odd.items()):
        yield Problem(f"chosen interface MTU on {host} is {mtu}; most hosts have {majority}",
                      hosts=[host], data={"mtu": mtu, "majority": majority})
