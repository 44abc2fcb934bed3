"""NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME against the interfaces this host really has."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.ifname import match_gloo_interfaces, match_interfaces
from preflight.model import RankFacts, Severity
from preflight.registry import LOCAL, CheckContext, Problem, Tags, check


def interface_names(facts: RankFacts) -> list[str] | None:
    """This host's interface names, or None when the interfaces gatherer gave nothing."""
    interfaces = facts.network.interfaces
    if interfaces is None:
        return None
    return [i.name for i in interfaces]


def _selection(facts: RankFacts, variable: str) -> tuple[str, list[str] | None, str] | None:
    """(spec, matched names or None on a bad spec, error) for a set variable, else None."""
    spec = facts.env.get(variable)
    names = interface_names(facts)
    if spec is None or not spec.strip() or names is None:
        return None
    matcher = match_interfaces if variable.startswith("NCCL") else match_gloo_interfaces
    try:
        return spec, matcher(spec, names), ""
    except ValueError as exc:
        return spec, None, str(exc)


def _no_match(facts: RankFacts, variable: str) -> Iterable[Problem]:
    selection = _selection(facts, variable)
    if selection is None:
        return
    spec, matched, error = selection
    if matched:
        return
    names = interface_names(facts) or []
    reason = error or f"matches no interface (this host has {', '.join(names) or 'none'})"
    yield Problem(f"{variable}={spec} {reason}", ranks=[facts.rank], hosts=[facts.host],
                  data={"variable": variable, "value": spec, "interfaces": names})


@check(
    "NCCL008",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Name an interface this host has (see `ip -br link`); NCCL syntax: `ib` matches the prefix "
    "ib0, ib1...; `=eth0` only eth0; `^docker,lo` everything except those.",
)
def nccl_ifname_matches_nothing(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NCCL_SOCKET_IFNAME matches no interface on this host.

    NCCL reads a comma list of name prefixes; `^` in front excludes them, `=` makes names
    exact (`^=docker0`). When nothing matches, NCCL fails at communicator init with "no socket
    interface found" on this host only, while the other hosts wait for it. An entry list with
    an empty item (`ib0,,ib1`) is reported too.
    """
    yield from _no_match(facts, "NCCL_SOCKET_IFNAME")


@check(
    "NCCL009",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.ERROR,
    hint="Name an interface this host has (exact names, comma separated, no prefixes).",
)
def gloo_ifname_matches_nothing(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """GLOO_SOCKET_IFNAME names no interface on this host.

    Gloo takes exact interface names (a comma list). A missing one makes
    init_process_group raise "Unable to find address for: <name>" at once on this rank; Gloo
    also carries torch's CPU collectives and monitored barriers in an NCCL job.
    """
    yield from _no_match(facts, "GLOO_SOCKET_IFNAME")


@check(
    "NCCL010",
    tag=Tags.NCCL,
    scope=LOCAL,
    severity=Severity.WARN,
    hint="Point GLOO_SOCKET_IFNAME at the same (fast, routable) interface as NCCL_SOCKET_IFNAME.",
)
def nccl_gloo_interfaces_differ(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME select different interfaces.

    Torch jobs use both: NCCL for GPU tensors, Gloo for CPU tensors, object collectives and
    barriers. Gloo on a management Ethernet that is not routed between all nodes (or is slow)
    times out multi-node collectives while NCCL itself is fine. Compared on the interfaces
    each variable actually selects on this host, so `ib` and `ib0,ib1` agree.
    """
    nccl = _selection(facts, "NCCL_SOCKET_IFNAME")
    gloo = _selection(facts, "GLOO_SOCKET_IFNAME")
    if not nccl or not gloo or not nccl[1] or not gloo[1]:
        return  # unset, or matching nothing: NCCL008 / NCCL009 say so
    if set(nccl[1]) != set(gloo[1]):
        yield Problem(
            f"NCCL_SOCKET_IFNAME={nccl[0]} selects {', '.join(nccl[1])} but GLOO_SOCKET_IFNAME={gloo[0]} "
            f"selects {', '.join(gloo[1])}",
            ranks=[facts.rank], hosts=[facts.host],
        )
