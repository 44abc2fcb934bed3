"""Spare nodes: every host's standing (best first) and the choice of the best N of them.

`HostRanking` is computed once per run from the findings and the probes' per-host figures
(preflight/steps/host_choice.py) and stored on the JobReport; `HostRanking.keep(n)` is the
choice for any N, pure data, so `preflight report --keep N`, `preflight.check` callers
(`JobReport.keep_hosts(n)`) and every renderer read the same answer.
"""

from __future__ import annotations

from msgspec import Struct, field

# How strong the evidence that a host is slow is, weakest first. Stronger evidence drops a host
# before weaker evidence, whatever the figures: a host named by localization goes before a host
# that only shared a slow group with it.
SLOW_NONE = 0  # no figure at all
SLOW_MEASURED = 1  # only the probes' raw per-group figures (no finding): orders otherwise equal hosts
SLOW_GROUP = 2  # in a confirmed slow group (a straggler), with the other hosts of that group
SLOW_LINK = 3  # one end of a confirmed slow link
SLOW_SUSPECT = 4  # in slow groups of several dimensions
SLOW_NAMED = 5  # named slow by localization (pairwise or group testing), confirmed against known-good hosts


class HostStanding(Struct):
    """One host as the choice sees it: the errors blaming it, how slow it is and on what evidence."""

    host: str
    order: int  # its position in the job (its lowest rank): the deterministic tie-break, earlier kept
    ranks: list[int] = field(default_factory=list)
    nodes: int = 1  # nodes that report this host name; more than one: kept or dropped together
    faults: list[str] = field(default_factory=list)  # host-fault errors naming it ("NCCL008: ...")
    slow_level: int = SLOW_NONE  # the strongest evidence of slowness (SLOW_*)
    # Pieces of evidence per level (index: SLOW_*), e.g. how many confirmed slow groups it is in.
    slow_counts: list[int] = field(default_factory=list)
    slow_fraction: float | None = None  # its worst figure at that level, as a fraction of its peers'
    slow_why: list[str] = field(default_factory=list)  # the evidence, strongest first

    @property
    def healthy(self) -> bool:
        """No host-fault error names it (it may still be slow)."""
        return not self.faults

    def why_dropped(self) -> str:
        """One line: why this host is left out when it is."""
        if self.faults:
            return "; ".join(self.faults)
        if self.slow_level > SLOW_NONE and self.slow_why:
            return "slowest: " + "; ".join(self.slow_why)
        return "spare, not needed: nothing against it; of equal hosts the job's later ones are left out"


class DroppedHost(Struct):
    """A host left out, and why."""

    host: str
    why: str


class HostChoice(Struct):
    """Which `keep` hosts to train on: `kept` in job order (the first is a fine MASTER_ADDR), the
    rest `dropped` with why. `chosen` False: no choice (too few healthy hosts, or an error every
    host shares), `why` says which; `kept` is then empty."""

    keep: int
    chosen: bool
    why: str
    kept: list[str] = field(default_factory=list)
    dropped: list[DroppedHost] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # e.g. a host name several nodes share


class HostRanking(Struct):
    """Every host of the run, best first (the last ones are dropped first); `blocked` says why no
    host may be chosen at all ("" when hosts can be chosen)."""

    hosts: list[HostStanding] = field(default_factory=list)
    blocked: str = ""

    def keep(self, count: int) -> HostChoice:
        """The best `count` hosts: every host a host-fault error names is dropped first, then the
        slowest (the most evidence at the strongest level, then at the next level down, and so on;
        then the lowest figure), then the job's later hosts. `hosts` is already in that order (best first)."""
        if count < 1:
            raise ValueError(f"keep must be at least 1 host, not {count}")
        if self.blocked:
            return HostChoice(count, False, self.blocked,
                              dropped=[DroppedHost(h.host, h.why_dropped()) for h in self.hosts if h.faults])
        healthy = [h for h in self.hosts if h.healthy]
        faulty = [DroppedHost(h.host, h.why_dropped()) for h in self.hosts if not h.healthy]
        if len(healthy) < count:
            return HostChoice(count, False, f"{len(healthy)} healthy host(s) of {len(self.hosts)}, "
                              f"{count} needed: not enough to train on", dropped=faulty)
        kept = sorted(healthy[:count], key=lambda h: h.order)
        spare = [DroppedHost(h.host, h.why_dropped()) for h in reversed(healthy[count:])]  # worst first
        notes = [f"host name {h.host} is shared by {h.nodes} nodes: a host file cannot tell them apart, "
                 "so they are kept or dropped together and count as one host" for h in self.hosts if h.nodes > 1]
        dropped = faulty + spare
        why = (f"kept {count} of {len(self.hosts)} host(s)" +
               (f", dropped {len(dropped)}: " + "; ".join(f"{d.host} ({d.why})" for d in dropped) if dropped else ""))
        return HostChoice(count, True, why, kept=[h.host for h in kept], dropped=dropped, notes=notes)
