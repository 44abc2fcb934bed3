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
from preflight.model import JobReport, table_ranks
from preflight.model.health_facts import HealthFacts

TITLE = "NVLink fabric: the domains the job's GPUs registered with (NVML fabric info)"
HEADERS = ["NVLink domain (cluster/clique)", "hosts", "ranks", "fabric health", "IMEX channel"]
MAX_HOSTS_SHOWN = 6


def _key(health: HealthFacts) -> str:
    """A rank's domain; `(in progress)` and kin where its GPU is on a fabric but not registered; ""
    where it has no fabric at all."""
    for gpu in health.gpus:
        fabric = gpu.fabric
        if fabric is not None and fabric.state:
            return fabric.domain or f"({STATES.get(fabric.state, str(fabric.state))})"
    return ""


def _health(sections: list[HealthFacts]) -> str:
    faults: Counter[str] = Counter()
    for health in sections:
        for gpu in health.gpus:
            if gpu.fabric is not None:
                faults.update(health_faults(gpu.fabric))
    if not faults:
        return f"healthy ({len(sections)} GPU(s))"
    return "; ".join(f"{fault} on {count} GPU(s)" for fault, count in faults.most_common())


def _imex(hosts: dict[str, HealthFacts]) -> str:
    read = {host: health.imex_channels for host, health in hosts.items() if health.imex_channels is not None}
    if not read:
        return "not read"
    having = sorted(host for host, channels in read.items() if channels)
    missing = sorted(set(read) - set(having))
    return f"{len(having)} of {len(read)} host(s)" + (f"; none on {', '.join(missing[:MAX_HOSTS_SHOWN])}"
                                                       if missing else "")


def rows(report: JobReport) -> list[list[str]]:
    """One row per domain, largest first; [] when no rank's GPU is on an NVLink fabric."""
    sections = table_ranks.health(report.ranks)
    numbers, host_of = table_ranks.rank_numbers(report.ranks), table_ranks.hosts(report.ranks)
    keys: dict[int, str] = {}  # by the section's id: a host's ranks share theirs
    domains: dict[str, list[int]] = defaultdict(list)  # domain -> rows
    for row, health in enumerate(sections):
        key = keys.get(id(health))
        if key is None:
            key = keys[id(health)] = _key(health)
        if key:
            domains[key].append(row)
    found = []
    for key, in_domain in sorted(domains.items(), key=lambda item: (-len(item[1]), item[0])):
        hosts: dict[str, HealthFacts] = {}
        for row in sorted(in_domain, key=numbers.__getitem__):
            hosts.setdefault(host_of[row], sections[row])
        names = sorted(hosts)
        shown = ", ".join(names[:MAX_HOSTS_SHOWN]) + (f" (+{len(names) - MAX_HOSTS_SHOWN})"
                                                       if len(names) > MAX_HOSTS_SHOWN else "")
        found.append([key, shown, rank_ranges(numbers[row] for row in in_domain),
                      _health([sections[row] for row in in_domain]), _imex(hosts)])
    return found
