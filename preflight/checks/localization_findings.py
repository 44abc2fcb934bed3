"""Localization: the hosts and links found slow, and how they were found (BW005, BW006, BW012, BW013).

Engine-scope checks, like probe_findings.py's: the probes' localization (preflight/probes/localize.py,
pairwise.py, hosttest.py) measures and decides; these turn what it named into findings with one id,
one severity and one hint each. What the spare-node choice (steps/host_choice.py) reads back from
their `data` it reads through the typed readers at the end, next to the code that writes it.
"""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.hostlist import rank_list, ranks_text
from preflight.lib.numbers import json_number, json_numbers
from preflight.lib.units import percent
from preflight.model import Finding, Severity
from preflight.model.probe_faults import Confirmed
from preflight.registry import Problem, Tags, engine_check

INTRA_HOST_LINK_HINT = ("Only this pair is slow while both ends are fast with others, and both are on one host: "
                        "check the intra-host path between their GPUs (NVLink/PCIe: nvidia-smi topo -m, "
                        "nvidia-smi nvlink --status, lspci link width) or, on CPU, shared memory and CPU "
                        "binding; there is no switch port on this path.")


def _confirmation(c: Confirmed) -> dict[str, float]:
    return {"first_fraction": c.first_fraction, "fraction": c.fraction, "confirm_gbps": c.gbps,
            "reference_gbps": c.reference_gbps, "false_alarm_p": c.false_alarm_p}


@engine_check(
    "BW005",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    hint="This rank stays slow against a known-good partner: across hosts check its host's NIC (link "
    "speed, errors, MTU), traffic shaping and cabling; on one host its GPU's PCIe/NVLink path and "
    "clocks; exclude the host if it stays slow.",
    blames_host=True,
)
def slow_host(rank: int, host: str, confirmed: Confirmed, partner: int, partner_host: str,
              median_gbps: float) -> Iterable[Problem]:
    """A rank slow with every peer in the round robin, and slow again against a known-good partner.

    Within the confirmed slow groups (plus their fastest sibling for reference), n-1 rounds of
    disjoint pairs exchange a buffer both ways. A rank whose median pair bandwidth is below
    --straggler-ratio times the median of all pairs is a candidate. It is measured again alone
    with the known-good rank whose pairs were fastest, between two runs of a reference pair of
    known-good ranks, and is named only when every figure (each the mean of four calls,
    probes/confirm.py) stays below every reference figure (and the median below the ratio). Its
    own host's path is blamed when the partner is on another host; on one host the message says
    it is the intra-host path.
    """
    where = (f"over the intra-host path (NVLink/PCIe/shared memory) to rank {partner} on the same host"
             if host and host == partner_host else f"against rank {partner} ({partner_host})")
    yield Problem(f"pairwise send/recv: rank {rank} ({host}) reaches {percent(confirmed.first_fraction)} of the median "
                  f"pair bandwidth {median_gbps:.3g} GB/s with every peer, and measured again alone {where} "
                  f"{percent(confirmed.fraction)} of a known-good pair's {confirmed.reference_gbps:.3g} GB/s",
                  ranks=[rank], hosts=[host] if host else [],
                  data={"fraction": confirmed.first_fraction, "partner": partner, **_confirmation(confirmed)})


@engine_check(
    "BW006",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    hint="Only this pair is slow while both ends are fast with others, across hosts: check the link "
    "or switch port between them.",
)
def slow_link(ranks: list[int], hosts: list[str], confirmed: Confirmed) -> Iterable[Problem]:
    """One slow pair between two otherwise fast ranks, slow again when measured alone.

    A pair across hosts is a network path (the link or switch port between them); a pair
    whose two ends share a host is an intra-host path (NVLink, PCIe or shared memory) and is
    worded and hinted as one.
    """
    same_host = len(set(hosts)) == 1 and bool(hosts[0])
    what = (f"the intra-host path (NVLink/PCIe/shared memory) between ranks {rank_list(ranks)} on {hosts[0]}"
            if same_host else f"the link between ranks {rank_list(ranks)} ({' - '.join(hosts)})")
    yield Problem(f"pairwise send/recv: {what} reaches {percent(confirmed.first_fraction)} of the median pair "
                  "bandwidth, "
                  f"and measured again alone {percent(confirmed.fraction)} of a known-good pair's "
                  f"{confirmed.reference_gbps:.3g} GB/s", ranks=ranks, hosts=hosts,
                  data={"fraction": confirmed.first_fraction, "intra_host": same_host, **_confirmation(confirmed)},
                  hint=INTRA_HOST_LINK_HINT if same_host else None)


@engine_check(
    "BW012",
    tag=Tags.PROBE,
    severity=Severity.WARN,
    hint="This host stays slow against known-good hosts: check its NIC (link speed, errors, MTU, "
    "traffic shaping, cabling) and, on GPU hosts, its GPUs' PCIe/NVLink paths; exclude the host "
    "if it stays slow.",
    blames_host=True,
)
def slow_host_group_tested(host: str, ranks: list[int], fractions: list[float], partners: list[str],
                           reference_gbps: float, rounds: int, seconds: float) -> Iterable[Problem]:
    """A host that adaptive group testing found slow, tested alone twice against known-good hosts.

    When the confirmed slow groups span hosts and two or more hosts sit in no slow group,
    the suspect hosts are split and each half measured (an all_reduce over a sub-communicator
    of its hosts plus one known-good host) until single hosts remain; a pool is slow when every
    one of its iterations is below --straggler-ratio times the median of a reference
    all_reduce over two known-good hosts, measured in the same round, its iterations
    alternating with the pool's. A host is named only when
    it tests slow alone twice, the second time with another known-good partner where there
    is one (preflight/probes/hosttest.py). The finding says how many rounds and seconds the
    search took.
    """
    shown = ", ".join(f"{percent(f)} with {p}" for f, p in zip(fractions, partners))
    yield Problem(f"group testing: host {host} ({ranks_text(ranks)}) is slow against known-good hosts: "
                  f"{shown} of the known-good reference {reference_gbps:.3g} GB/s "
                  f"(found in {rounds} rounds, {seconds:.1f} s)",
                  ranks=ranks, hosts=[host],
                  data={"fractions": fractions, "partners": partners, "reference_gbps": reference_gbps,
                        "method": "grouptest", "rounds": rounds, "seconds": round(seconds, 3)})


@engine_check(
    "BW013",
    tag=Tags.PROBE,
    severity=Severity.INFO,
    hint="Nothing to do: this says how the slow groups were localized and what it cost; the "
    "hosts and links it found are their own findings.",
)
def localization_summary(method: str, suspects: list[str], good: list[str], rounds: int, tests: int,
                         seconds: float, named: list[str], extra: dict[str, object] | None = None,
                         unfinished: str = "", slow_ranks: list[int] | None = None) -> Iterable[Problem]:
    """How the confirmed slow groups were localized, and what it cost.

    `pairwise`: the round robin over the slow groups' ranks (n-1 rounds) plus its confirming
    pass (one round per pair). `grouptest`: adaptive group testing among hosts over
    sub-communicators (about 2 log2 h rounds per slow host among h suspects, each round
    also measuring a reference pair of known-good hosts), chosen when the round robin would
    take more rounds than that. `pairwise, then grouptest`: the round robin named nothing, or
    fewer than half of its pairs were healthy so its yardstick could not be trusted, and
    group testing ran after it. The data splits the rounds between the two; rounds, tests
    and seconds are rank 0's. `unfinished` says which step was cut short (a collective that did
    not complete within --probe-timeout, or failed): what it would have named is unknown.
    When it names no host or link, the slowness is not a host's nor a link's of its own: it
    follows the ranks BW004 names (`slow_ranks`, those in slow groups of several dimensions),
    and the summary says so rather than "nobody".
    """
    if named:
        who = ", ".join(named)
    elif slow_ranks:
        who = (f"no single host or link; the slowness follows rank{'s' if len(slow_ranks) > 1 else ''} "
               f"{rank_list(slow_ranks)} (BW004)")
    else:
        who = "no single host or link"
    cut = f"; cut short: {unfinished}" if unfinished else ""
    yield Problem(f"localization by {method} over {len(suspects)} suspect host(s) with {len(good)} known-good: "
                  f"{rounds} rounds, {tests} tests, {seconds:.1f} s; named {who}{cut}",
                  hosts=[],
                  data={"method": method, "suspects": suspects, "good": good, "rounds": rounds, "tests": tests,
                        "seconds": round(seconds, 3), "named": named, "unfinished": unfinished, **(extra or {})})


# -- Readers of these findings' data (steps/host_choice.py): the keys are written above and read
# only here, so a renamed key fails tests/checks/test_evidence_readers.py, not the spare-node choice.

def slow_host_fraction(finding: Finding) -> float | None:
    """BW005 / BW012: the lowest fraction of its known-good reference the host reached measured alone
    (BW005's confirming pass, BW012's tests); None when the data has none."""
    fractions = json_numbers(finding.data.get("fractions")) or json_numbers([finding.data.get("fraction")])
    return min(fractions) if fractions else None


def slow_link_fraction(finding: Finding) -> float | None:
    """BW006: the slow pair's fraction of a known-good pair's bandwidth, measured alone."""
    return json_number(finding.data.get("fraction"))
