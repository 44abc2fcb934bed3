"""The NVLink fabric section every renderer shows: a row per NVLink domain the job's GPUs registered with.

Read from each rank's bound GPU (`facts.health.gpus[0].fabric`, NVML's fabric info): the domain
(cluster UUID / clique), its hosts and ranks, the fabric's health on those GPUs (the faults of the
health mask, or the registration state where it is not completed) and which hosts can open an IMEX
channel. Nothing is shown for a job without fabric info (no NVSwitch, or no NVML).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from preflight.lib.hostlist import rank_ranges
from preflight.lib.nvml_fabric import STATES, health_faults
from preflight.model import JobReport, RankFacts

TITLE = "NVLink fabric: the domains the job's GPUs registered with (NVML fabric info)"
HEADERS = ["NVLink domain (cluster/clique)", "hosts", "ranks", "fabric health", "IMEX channel"]
MAX_HOSTS_SHOWN = 6


def _key(facts: RankFacts) -> str:
    """The rank's domain; `(in progress)` and kin where its GPU is on a fabric but not registered; ""
    where it has no fabric at all."""
    for gpu in facts.health.gpus:
        fabric = gpu.fabric
        if fabric is not None and fabric.state:
            return fabric.domain or f"({STATES.get(fabric.state, str(fabric.state))})"
    return ""


def _health(ranks: list[RankFacts]) -> str:
    faults: Counter[str] = Counter()
    for facts in ranks:
        for gpu in facts.health.gpus:
            if gpu.fabric is not None:
                faults.update(health_faults(gpu.fabric))
    if not faults:
        return f"healthy ({len(ranks)} GPU(s))"
    return "; ".join(f"{fault} on {count} GPU(s)" for fault, count in faults.most_common())


def _imex(hosts: dict[str, RankFacts]) -> str:
    read = {host: facts.health.imex_channels for host, facts in hosts.items()
            if facts.health.imex_channels is not None}
    if not read:
        return "not read"
    having = sorted(host for host, channels in read.items() if channels)
    missing = sorted(set(read) - set(having))
    return f"{len(having)} of {len(read)} host(s)" + (f"; none on {', '.join(missing[:MAX_HOSTS_SHOWN])}"
                                                       if missing else "")


def rows(report: JobReport) -> list[list[str]]:
    """One row per domain, largest first; [] when no rank's GPU is on an NVLink fabric."""
    domains: dict[str, list[RankFacts]] = defaultdict(list)
    for facts in report.ranks:
        key = _key(facts)
        if key:
            domains[key].append(facts)
    found = []
    for key, ranks in sorted(domains.items(), key=lambda item: (-len(item[1]), item[0])):
        hosts: dict[str, RankFacts] = {}
        for facts in sorted(ranks, key=lambda f: f.rank):
            hosts.setdefault(facts.host, facts)
        names = sorted(hosts)
        shown = ", ".join(names[:MAX_HOSTS_SHOWN]) + (f" (+{len(names) - MAX_HOSTS_SHOWN})"
                                                       if len(names) > MAX_HOSTS_SHOWN else "")
        found.append([key, shown, rank_ranges(f.rank for f in ranks), _health(ranks), _imex(hosts)])
    return found
