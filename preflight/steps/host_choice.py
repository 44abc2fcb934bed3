"""Spare nodes: rank every host of a run, best first, from its JobReport (a pure function).

Asked for N+k nodes, a job trains on the best N (`preflight report --keep N`, the sbatch
script's PREFLIGHT_SPARE=k, `JobReport.keep_hosts(n)`). The order, worst last:

1. every host a host-fault error names (the rule of `--retry-exclude-file`,
   preflight/lib/host_fault.py) goes last: it is dropped first;
2. then the slowest, by the strongest evidence (model/host_choice.py's SLOW_* levels: named by
   localization, a suspect in several dimensions, a slow link's end, a confirmed slow group's
   member, the raw per-group figures), compared level by level from the strongest down: more
   evidence at a level goes first (a host in two confirmed slow groups before a host in one of
   them: the one they share is the likely cause; of a slow link's two ends, the one with more
   evidence below), then by the lowest figure at its strongest level;
3. ties in the job's order: of equal hosts the later ones are dropped.

Slowness is read from the findings' data through the typed readers beside the checks that
write it (probe_findings.straggler_figures, localization_findings.slow_host_fraction,
device_probe.slow_device, history_findings.drop_fraction, ...), the findings recognised by their check (by reference),
never by their severity: a confirmed straggler is slow whether it is reported as a warning or
an error. An error every host shares (`job_error`) blocks any choice: it is the job's to fix, and an
incomplete run (exit 4) proves nothing about a host.

Each kind of evidence is one `SlownessSource` in SLOWNESS_SOURCES: the collective probes'
findings and raw figures, the device probes' slow devices (DEV003-DEV005), the run history's
drops (HIS002) and the checkpoint path's slow hosts (STO007).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from msgspec import Struct

from preflight.checks import device_probe, history_findings, localization_findings, probe_findings, storage
from preflight.lib.grouping import shared_host_names
from preflight.lib.host_fault import job_error
from preflight.lib.shorten import shorten
from preflight.lib.units import percent
from preflight.model import ExitCode, Finding, HostChoice, HostRanking, HostStanding, JobReport, Severity
from preflight.model.host_choice import SLOW_GROUP, SLOW_LINK, SLOW_MEASURED, SLOW_NAMED, SLOW_NONE, SLOW_SUSPECT
from preflight.registry import EngineCheck


class Slowness(Struct, frozen=True):
    """One piece of evidence that a host is slow: how strong (SLOW_*), its figure as a fraction of
    its peers' (None: no figure), and one line saying where it comes from."""

    host: str
    level: int
    fraction: float | None
    why: str


SlownessSource = Callable[[JobReport], Iterable[Slowness]]


def _findings_of(report: JobReport, *checks: EngineCheck[Any]) -> Iterator[Finding]:
    ids = {check.id for check in checks}
    return (f for f in report.findings if f.check_id in ids)


def _percent(fraction: float | None) -> str:
    return "" if fraction is None else f" ({percent(fraction)} of its peers)"


def named_slow_hosts(report: JobReport) -> Iterator[Slowness]:
    """Hosts localization named slow against known-good hosts (pairwise BW005, group testing BW012)."""
    for finding in _findings_of(report, localization_findings.slow_host, localization_findings.slow_host_group_tested):
        fraction = localization_findings.slow_host_fraction(finding)
        for host in finding.hosts:
            yield Slowness(host, SLOW_NAMED, fraction, f"{finding.check_id} named it slow{_percent(fraction)}")


def cross_dim_suspects(report: JobReport) -> Iterator[Slowness]:
    """Hosts of a rank that sits in slow groups of several dimensions (BW004)."""
    for finding in _findings_of(report, probe_findings.cross_dim_suspect):
        for host in finding.hosts:
            yield Slowness(host, SLOW_SUSPECT, None, f"{finding.check_id}: in slow groups of several dimensions")


def slow_link_ends(report: JobReport) -> Iterator[Slowness]:
    """Both ends of a confirmed slow link (BW006): dropping either one removes the link."""
    for finding in _findings_of(report, localization_findings.slow_link):
        fraction = localization_findings.slow_link_fraction(finding)
        for host in sorted(set(finding.hosts)):
            yield Slowness(host, SLOW_LINK, fraction, f"{finding.check_id}: one end of a slow link{_percent(fraction)}")


def straggler_members(report: JobReport) -> Iterator[Slowness]:
    """The hosts of a confirmed slow group (BW003), at the group's figure (the confirming pass's
    where there is one)."""
    for finding in _findings_of(report, probe_findings.straggler_group):
        group = probe_findings.straggler_figures(finding)
        index = "?" if group.group_index is None else group.group_index
        for host in sorted(set(finding.hosts)):
            yield Slowness(host, SLOW_GROUP, group.fraction,
                           f"{finding.check_id}: in slow {group.dim} group {index}{_percent(group.fraction)}")


def measured_figures(report: JobReport) -> Iterator[Slowness]:
    """The probes' raw figures, one per host: the geometric mean, over the groups it is in, of the
    group's busbw as a fraction of its dimension's fastest group (same op, the largest size;
    dimensions of two or more groups only). The fastest, not the median, is the yardstick: when
    one host is in most groups of a dimension, most groups are slow. Unconfirmed: this only
    orders hosts that no finding tells apart."""
    largest: dict[tuple[str, str], int] = {}
    for result in report.probes:
        key = (result.dim, result.op)
        largest[key] = max(largest.get(key, 0), result.size_bytes)
    groups: dict[tuple[str, str], list[tuple[float, list[str]]]] = defaultdict(list)
    for result in report.probes:
        if result.size_bytes == largest[(result.dim, result.op)] and result.group_index >= 0:
            groups[(result.dim, result.op)].append((result.busbw_gbps, result.hosts))
    per_host: dict[str, list[float]] = defaultdict(list)
    for members in groups.values():
        fastest = max(busbw for busbw, _ in members)
        if len(members) < 2 or fastest <= 0:
            continue
        for busbw, hosts in members:
            for host in set(hosts):
                per_host[host].append(max(busbw, 1e-12) / fastest)
    for host, fractions in sorted(per_host.items()):
        fraction = statistics.geometric_mean(fractions)
        yield Slowness(host, SLOW_MEASURED, fraction,
                       f"measured {percent(fraction)} of the fastest over {len(fractions)} probe group(s), no finding")


def slow_devices(report: JobReport) -> Iterator[Slowness]:
    """Hosts of a device slower than its siblings in both passes (matrix DEV003, copy DEV004, host
    link DEV005): confirmed against same-model devices of this job, as localization's hosts are."""
    checks = (device_probe.matrix_slow, device_probe.copy_slow, device_probe.host_link_slow)
    for finding in _findings_of(report, *checks):
        device = device_probe.slow_device(finding)
        for host in finding.hosts:
            why = f"{finding.check_id}: its device's {device.figure} is slow{_percent(device.fraction)}"
            yield Slowness(host, SLOW_NAMED, device.fraction, why)


def history_drops(report: JobReport) -> Iterator[Slowness]:
    """Hosts whose figures fell below their own recent history (HIS002): the same weight as a
    confirmed slow group, since a whole job slowed alike shows here and nowhere else."""
    for finding in _findings_of(report, history_findings.below_own_history):
        fraction = history_findings.drop_fraction(finding)
        for host in finding.hosts:
            share = "" if fraction is None else f" ({percent(fraction)} of its median)"
            yield Slowness(host, SLOW_GROUP, fraction, f"{finding.check_id}: below its own history{share}")


def slow_storage_hosts(report: JobReport) -> Iterator[Slowness]:
    """Hosts whose checkpoint path writes or reads far below the other hosts', confirmed by a second pass
    beside a known-good host (STO007): named as localization names a host, since every synchronous save
    waits for the slowest host."""
    for finding in _findings_of(report, storage.slow_storage):
        figures = storage.slow_storage_figures(finding)
        for host in finding.hosts:
            yield Slowness(host, SLOW_NAMED, figures.fraction,
                           f"{finding.check_id}: its checkpoint path's {figures.figure} is slow"
                           f"{_percent(figures.fraction)}")


# Strongest first is not required: each host keeps its strongest evidence, whatever the order.
SLOWNESS_SOURCES: tuple[SlownessSource, ...] = (
    named_slow_hosts, cross_dim_suspects, slow_link_ends, straggler_members, measured_figures, slow_devices,
    history_drops, slow_storage_hosts,
)


def _host_order(report: JobReport) -> dict[str, tuple[int, list[int]]]:
    """Every host of the job (those that reported and those the launcher placed ranks on) with
    its lowest rank and its ranks, in the job's order."""
    ranks: dict[str, set[int]] = defaultdict(set)
    for facts in report.ranks:
        if facts.host:
            ranks[facts.host].add(facts.rank)
        for rank, host in facts.world.expected_hosts.items():
            if host:
                ranks[host].add(rank)
    for host in report.bad_hosts:
        ranks.setdefault(host, set())
    last = len(report.ranks) + 1
    return {host: (min(r) if r else last, sorted(r)) for host, r in ranks.items()}


def _faults(report: JobReport) -> dict[str, list[str]]:
    """Per bad host, the error findings that name it (the exclude list's reasons)."""
    bad = set(report.bad_hosts)
    faults: dict[str, list[str]] = defaultdict(list)
    for finding in report.findings:
        if finding.severity != Severity.ERROR:
            continue
        for host in sorted(bad.intersection(finding.hosts)):
            faults[host].append(f"{finding.check_id}: {shorten(finding.message, 160)}")
    return faults


def blocked_reason(report: JobReport) -> str:
    """Why no host may be chosen from this run ("" when hosts can be)."""
    if report.exit_code in (int(ExitCode.INCOMPLETE), int(ExitCode.BAD_INPUT)):
        return f"the run is {report.verdict} (exit {report.exit_code}): it proves nothing about a host; {report.why}"
    shared = job_error(report)
    if shared is not None:
        return (f"an error every host shares is the job's to fix, not a host's: {shared.check_id}: "
                f"{shorten(shared.message, 200)}")
    if not report.ranks:
        return "no rank reported"
    return ""


def rank_hosts(report: JobReport, sources: Iterable[SlownessSource] = SLOWNESS_SOURCES) -> HostRanking:
    """Every host of the run, best first, and whether any may be chosen (pure: reads the report only)."""
    order = _host_order(report)
    faults = _faults(report)
    evidence: dict[str, list[Slowness]] = defaultdict(list)
    for source in sources:
        for item in source(report):
            if item.host in order:
                evidence[item.host].append(item)
    shared = shared_host_names(report.ranks)
    standings = []
    no_evidence = [0] * (SLOW_NAMED + 1)
    for host, (first, ranks) in order.items():
        items = evidence.get(host, [])
        if not items:  # most hosts (every one but the slow, on 16,384 hosts): nothing to weigh
            standings.append(HostStanding(host=host, order=first, ranks=ranks, nodes=max(1, len(shared.get(host, []))),
                                          faults=faults.get(host, []), slow_counts=list(no_evidence)))
            continue
        level = max((item.level for item in items), default=SLOW_NONE)
        strongest = [item for item in items if item.level == level]
        fractions = [item.fraction for item in strongest if item.fraction is not None]
        counts = [sum(1 for item in items if item.level == at) for at in range(SLOW_NAMED + 1)]
        ordered = sorted(items, key=lambda item: (-item.level, item.fraction if item.fraction is not None else 2.0))
        standings.append(HostStanding(
            host=host, order=first, ranks=ranks, nodes=max(1, len(shared.get(host, []))), faults=faults.get(host, []),
            slow_level=level, slow_counts=counts, slow_fraction=min(fractions) if fractions else None,
            slow_why=list(dict.fromkeys(item.why for item in ordered))[:4]))
    standings.sort(key=_best_first)
    return HostRanking(hosts=standings, blocked=blocked_reason(report))


def _best_first(standing: HostStanding) -> tuple[bool, tuple[int, ...], float, int, str]:
    """Healthy before faulty; less evidence of slowness first, compared from the strongest level
    down (so any evidence at a stronger level outweighs all at weaker ones); a higher figure
    first (no figure counts as on par); earlier in the job first; the name last, for a total order."""
    fraction = standing.slow_fraction if standing.slow_fraction is not None else 1.0
    return (not standing.healthy, tuple(reversed(standing.slow_counts)), -fraction, standing.order, standing.host)


def choose_hosts(report: JobReport, keep: int) -> HostChoice:
    """The best `keep` hosts of this run, and why the others are dropped."""
    return rank_hosts(report).keep(keep)
