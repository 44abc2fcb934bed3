"""Hosts whose wall clock is off rank 0's (CLK001), and hosts that do not keep time while others do (CLK002).

The offset is measured through the store during the exchange (preflight/channel/clock.py): one
rank per host, the best of several round trips, with an error bar of half that round trip.
"""

from __future__ import annotations

from collections.abc import Iterable

from preflight.lib.grouping import first_per_host
from preflight.lib.hostlist import host_ranges
from preflight.model import RankFacts, Severity
from preflight.registry import CROSS, JobView, Problem, Tags, check


def _measured(job: JobView) -> list[RankFacts]:
    return [f for f in job.ranks if f.placement.clock.offset_s is not None and f.placement.clock.error_s is not None]


def _keeper(facts: RankFacts) -> str:
    clock = facts.placement.clock
    daemon = clock.daemon or "no time daemon seen"
    state = {True: "synchronised", False: "not synchronised", None: "sync state unreadable"}[clock.synchronised]
    return f"{daemon}, {state}"


@check(
    "CLK001",
    tag=Tags.WORLD,
    scope=CROSS,
    severity=Severity.WARN,
    hint="Run a time daemon on every host and let it synchronise (chronyc tracking / timedatectl "
    "timesync-status); step the clock once (chronyc makestep) before the job.",
)
def clock_offset(job: JobView) -> Iterable[Problem]:
    """A host whose wall clock is off rank 0's by more than the threshold, beyond the error bar.

    Skewed clocks misorder logs, NCCL flight-recorder dumps and checkpoint timestamps across
    hosts, and time-based logic (timeouts computed from wall time, lease expiry) disagrees. One
    rank per host measures its offset from rank 0's clock through store round trips; a host is
    named when |offset| minus its error bar exceeds the threshold (1 s by default,
    `--expect clock_skew=250ms` to change it).
    """
    threshold = job.ranks[0].placement.clock.threshold_s if job.ranks else 0.0
    for facts in _measured(job):
        clock = facts.placement.clock
        assert clock.offset_s is not None and clock.error_s is not None
        if abs(clock.offset_s) - clock.error_s <= threshold:
            continue
        direction = "ahead of" if clock.offset_s > 0 else "behind"
        yield Problem(
            f"{facts.host}'s clock is {abs(clock.offset_s):.3f} s {direction} rank 0's "
            f"(+- {clock.error_s:.3f} s, best of {clock.samples} store round trips; threshold {threshold:g} s; "
            f"{_keeper(facts)})",
            ranks=[facts.rank], hosts=[facts.host],
            data={"offset_s": clock.offset_s, "error_s": clock.error_s, "threshold_s": threshold,
                  "daemon": clock.daemon, "synchronised": clock.synchronised},
        )


@check(
    "CLK002",
    tag=Tags.WORLD,
    scope=CROSS,
    severity=Severity.INFO,
    hint="Start the site's time daemon (chronyd, ntpd or systemd-timesyncd) on the named hosts, as on the others.",
)
def clock_not_kept(job: JobView) -> Iterable[Problem]:
    """Hosts whose kernel says their clock is not synchronised, while other hosts' is.

    Read with adjtimex(2) (the kernel's own flag, set by whichever daemon disciplines the clock);
    where no host is synchronised the job's hosts are alike and nothing is said.
    """
    hosts = {host: facts.placement.clock.synchronised for host, facts in first_per_host(job.ranks).items()}
    unsynced = sorted(h for h, synced in hosts.items() if synced is False)
    if unsynced and any(synced for synced in hosts.values()):
        yield Problem(f"clock not synchronised on {host_ranges(unsynced)}, while it is on "
                      f"{sum(1 for s in hosts.values() if s)} other host(s)", hosts=unsynced)
