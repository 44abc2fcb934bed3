"""Reachability checks over the results of the reachability step (steps/tcp_reach.py).

The step's outcome reaches the cross checks as `job.reachability`, a ReachabilityOutcome
(preflight/model/reachability.py): the roster of listeners, each prober host's probes, and
the hosts that published no result in time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from preflight.model import ReachabilityOutcome, ReachListener, ReachProbe, Severity
from preflight.registry import CROSS, JobView, Problem, Tags, check


def failed_pairs(outcome: ReachabilityOutcome) -> dict[tuple[str, str], ReachProbe]:
    """(prober, target) -> the failed probe, for probes that really ran."""
    failed = {}
    for prober, results in outcome.results.items():
        for result in results:
            if not result.ok and not result.skipped:
                failed[(prober, result.target)] = result
    return failed


def culprits(outcome: ReachabilityOutcome) -> dict[str, list[str]]:
    """Hosts that every one of their (two or more) probers failed to reach, while other probes worked.

    Returns culprit host -> its probers.
    """
    probers: dict[str, list[str]] = defaultdict(list)
    failed_to: dict[str, list[str]] = defaultdict(list)
    any_ok = False
    for prober, results in outcome.results.items():
        for result in results:
            if result.skipped:
                continue
            probers[result.target].append(prober)
            if result.ok:
                any_ok = True
            else:
                failed_to[result.target].append(prober)
    if not any_ok:
        return {}  # nothing got through anywhere: no single host to blame
    return {host: sorted(by) for host, by in sorted(probers.items())
            if len(by) >= 2 and len(failed_to[host]) == len(by)}


@check(
    "NET007",
    tag=Tags.NETWORK,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="A firewall, routing or link fault between these hosts: check nft/iptables rules, routes and "
    "the switch path on that interface; NCCL/Gloo connections between them will hang or fail.",
)
def unreachable_pairs(job: JobView) -> Iterable[Problem]:
    """A host's chosen address did not accept TCP from another host within the deadline.

    Each host listens on the address of the interface NCCL/Gloo will use and is probed by its
    ring neighbours and a few random peers (bounded fan-out, not every pair). A pair whose
    connection failed is named `prober -> target on <interface>`; both directions failing are
    one finding. Pairs involving a host that nobody reaches are summed up by NET008.
    """
    outcome = job.reachability
    if not outcome:
        return
    failed = failed_pairs(outcome)
    blamed = set(culprits(outcome))
    seen: set[frozenset[str]] = set()
    for (prober, target), result in sorted(failed.items()):
        pair = frozenset((prober, target))
        if pair in seen or pair & blamed:  # a dead host's links are NET008's, once
            continue
        seen.add(pair)
        back = failed.get((target, prober))
        arrow = "<->" if back else "->"
        interface = result.interface or "?"
        yield Problem(
            f"{prober} {arrow} {target} on {interface}: {result.error} "
            f"(connecting to {result.address})",
            hosts=[prober, target],
            data={"prober": prober, "target": target, "interface": interface, "address": result.address,
                  "error": result.error, "both_directions": bool(back)},
        )


@check(
    "NET008",
    tag=Tags.NETWORK,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="This host is cut off on the job's interface (link down, firewall, wrong address): fix it or "
    "exclude it (--exclude-file) and resubmit.",
    blames_host=True,
)
def unreachable_host(job: JobView) -> Iterable[Problem]:
    """A host that none of its probers could reach: the culprit, rather than each of its links."""
    outcome = job.reachability
    if not outcome:
        return
    roster = {entry.host: entry for entry in outcome.roster}
    for host, probers in culprits(outcome).items():
        entry = roster.get(host, ReachListener(host))
        yield Problem(
            f"{host} is unreachable on {entry.interface or '?'} ({entry.address or None}) from all "
            f"{len(probers)} hosts that probed it: {', '.join(probers)}",
            hosts=[host], data={"probers": probers, "interface": entry.interface or None},
        )


@check(
    "NET009",
    tag=Tags.NETWORK,
    scope=CROSS,
    severity=Severity.COULD_NOT_RUN,
    hint="These hosts published no listener or no result before the deadline; their reachability is "
    "unverified (see their other findings: interface, store, missing ranks).",
)
def reachability_incomplete(job: JobView) -> Iterable[Problem]:
    """The reachability step could not test some hosts (no listener, or no result in time)."""
    outcome = job.reachability
    if not outcome:
        return
    no_listener = {e.host: e.error for e in outcome.roster if e.error}
    for host, reason in sorted(no_listener.items()):
        yield Problem(f"{host} was not probed: {reason}", hosts=[host])
    for host in outcome.missing:
        if host not in no_listener:
            yield Problem(f"{host} published no reachability result in time", hosts=[host])
