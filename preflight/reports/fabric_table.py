"""The NVLink fabric section every renderer shows: a row per NVLink domain the job's GPUs registered with.

Read from each rank's bound GPU (`facts.health.gpus[0].fabric`, NVML's fabric info): the domain
(cluster UUID / clique), its hosts and ranks, the fabric's health on those GPUs (the faults of the
health mask, or the registration state where it is not completed) and which hosts can open an IMEX
channel. Nothing is shown for a job without fabric info (no NVSwitch, or no NVML).

The HTML lists every domain; the text and the terminal at most MAX_DOMAINS, those that need a look
first (a fault, a GPU not registered, a host without an IMEX channel), and one line for the rest: a
131,072-rank job on NVL72 racks has 1,821 domains, which were 3,600 lines of a healthy run's terminal.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from msgspec import Struct

from preflight.lib.grouping import LastAnswerKept, hosts_by_row, numbers_by_row
from preflight.lib.hostlist import rank_ranges
from preflight.lib.nvml_fabric import STATES, health_faults
from preflight.model import JobReport, RankFacts, table_ranks
from preflight.model.health_facts import GpuFabric, HealthFacts

TITLE = "NVLink fabric: the domains the job's GPUs registered with (NVML fabric info)"
HEADERS = ["NVLink domain (cluster/clique)", "hosts", "ranks", "fabric health", "IMEX channel"]
MAX_HOSTS_SHOWN = 6
MAX_DOMAINS = 32  # the text and terminal show those that need a look first; the HTML shows all


class _Domain(Struct, frozen=True):
    """One domain's row, and whether it needs a look (what the text and terminal keep first)."""

    cells: list[str]
    attention: bool
    gpus: int


def _key(health: HealthFacts) -> str:
    """A rank's domain; `(in progress)` and kin where its GPU is on a fabric but not registered; ""
    where it has no fabric at all."""
    for gpu in health.gpus:
        fabric = gpu.fabric
        if fabric is not None and fabric.state:
            return fabric.domain or f"({STATES.get(fabric.state, str(fabric.state))})"
    return ""


def _health(sections: list[HealthFacts]) -> tuple[str, bool]:
    """The domain's fabric health, and whether any GPU of it has a fault."""
    # Counted by what the faults depend on (a few distinct values), then put in words once each: 72 GPUs a
    # domain on NVL72 racks, 131,072 in a job.
    reports = Counter((gpu.fabric.health_mask, gpu.fabric.health_summary) for health in sections
                      for gpu in health.gpus if gpu.fabric is not None)
    faults: Counter[str] = Counter()
    for (mask, summary), count in reports.items():
        for fault in health_faults(GpuFabric(health_mask=mask, health_summary=summary)):
            faults[fault] += count
    if not faults:
        return f"healthy ({len(sections)} GPU(s))", False
    return "; ".join(f"{fault} on {count} GPU(s)" for fault, count in faults.most_common()), True


def _imex(hosts: dict[str, HealthFacts]) -> tuple[str, bool]:
    """Which of the domain's hosts can open an IMEX channel, and whether one that was read cannot."""
    read = {host: health.imex_channels for host, health in hosts.items() if health.imex_channels is not None}
    if not read:
        return "not read", False
    having = sorted(host for host, channels in read.items() if channels)
    missing = sorted(set(read) - set(having))
    return f"{len(having)} of {len(read)} host(s)" + (f"; none on {', '.join(missing[:MAX_HOSTS_SHOWN])}"
                                                       if missing else ""), bool(missing)


def rows(report: JobReport) -> list[list[str]]:
    """One row per domain, largest first; [] when no rank's GPU is on an NVLink fabric."""
    return [domain.cells for domain in _domains(report.ranks)]


def shown_rows(report: JobReport, limit: int = MAX_DOMAINS) -> list[list[str]]:
    """The rows the text and terminal show: every domain when they are few; else `limit` of them, those
    that need a look (a fault, a GPU not registered, a host without an IMEX channel) first, then the largest."""
    return [domain.cells for domain in _shown_and_hidden(report, limit)[0]]


def hidden_line(report: JobReport, limit: int = MAX_DOMAINS) -> str:
    """The line under the text's and terminal's table when domains were left out of it ("" when none were)."""
    hidden = _shown_and_hidden(report, limit)[1]
    if not hidden:
        return ""
    healthy = " healthy" if not any(domain.attention for domain in hidden) else ""
    return (f"... and {len(hidden)} more{healthy} NVLink domain(s) ({sum(d.gpus for d in hidden)} GPU(s)); "
            "see the HTML or JSON report")


def _shown_and_hidden(report: JobReport, limit: int) -> tuple[list[_Domain], list[_Domain]]:
    """The domains the text and terminal show, and those they leave to the line under the table."""
    domains = _domains(report.ranks)
    if len(domains) <= limit:
        return domains, []
    ordered = sorted(domains, key=lambda d: not d.attention)  # stable: the largest first within each kind
    return ordered[:limit], ordered[limit:]


@LastAnswerKept
def _domains(ranks: Sequence[RankFacts]) -> list[_Domain]:
    """Each domain's row, largest first (kept: the text, the terminal and the HTML ask for one report)."""
    sections = table_ranks.health(ranks)
    numbers, host_of = numbers_by_row(ranks), hosts_by_row(ranks)
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
        health, faulty = _health([sections[row] for row in in_domain])
        imex, lacking = _imex(hosts)
        unregistered = key.startswith("(")  # on a fabric, not registered with it: `_key`'s "(in progress)"
        found.append(_Domain([key, shown, rank_ranges(numbers[row] for row in in_domain), health, imex],
                             attention=faulty or lacking or unregistered, gpus=len(in_domain)))
    return found
