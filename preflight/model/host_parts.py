"""The parts of a rank's sections that its host's ranks (or its job's) read alike, split off and joined back.

A rank's health and placement sections are its own (its bound GPU, its CPUs), but some of what they hold is
its host's, the same on each of its ranks: the RDMA ports' error counters (health), the NUMA nodes' CPUs and
the build fingerprint its local rank 0 takes (placement). On an 8-GPU node those are ~2.7 kB of a rank's ~4.3
kB. A host's network section is its own (its addresses), but its RDMA ports (device, state, rate, firmware:
~2.3 kB of an 8-port host's ~3.2 kB) are the same on every host of a healthy homogeneous job, so they travel
apart too: one value for the job where hosts agree. The payload (channel/wire.py) and the report's rank table
(model/rank_table.py) carry them once per distinct value (a host's, or the job's) beside each rank's own part;
this module is the one place that says which parts those are. Rank 0 splits and joins them once per rank
(131,072 times at the largest scale, on GPU hosts each rank's own): the copies are `section_copy.clone`'s,
with no __init__ re-run (every part was validated where it was decoded or gathered).
"""

from __future__ import annotations

from typing import Any, TypeVar

from preflight.model.health_facts import HealthFacts, IbCounters
from preflight.model.placement_facts import BuildFacts, PlacementFacts
from preflight.model.rank_facts import IbPort, NetworkFacts
from preflight.model.section_copy import clone

S = TypeVar("S")
NO_BUILD = BuildFacts()  # what a rank that did not take the fingerprint holds (read-only)


def split_health(health: HealthFacts) -> tuple[HealthFacts, list[IbCounters]]:
    """(the rank's own health, without the port counters; its host's port counters)."""
    return _split_list(health, "ib_counters")


def join_health(own: HealthFacts, counters: list[IbCounters]) -> HealthFacts:
    """The rank's health: its own part with its host's port counters."""
    return _joined_list(own, "ib_counters", counters)


def split_placement(placement: PlacementFacts) -> tuple[PlacementFacts, dict[int, list[int]], BuildFacts]:
    """(the rank's own placement, without the NUMA CPUs and the build fingerprint; its host's NUMA CPUs;
    the build fingerprint, NO_BUILD's value where the rank took none)."""
    numa_cpus, build = placement.affinity.numa_cpus, placement.build
    if not numa_cpus and build == NO_BUILD:
        return placement, numa_cpus, build
    own = clone(placement, build=BuildFacts(), affinity=clone(placement.affinity, numa_cpus={}))
    return own, numa_cpus, build


def join_placement(own: PlacementFacts, numa_cpus: dict[int, list[int]], build: BuildFacts) -> PlacementFacts:
    """The rank's placement: its own part with its host's NUMA CPUs and build fingerprint."""
    if not numa_cpus and build == NO_BUILD:
        return own
    return clone(own, build=build, affinity=clone(own.affinity, numa_cpus=numa_cpus))


def split_network(network: NetworkFacts) -> tuple[NetworkFacts, list[IbPort]]:
    """(the host's network section without its RDMA ports; the ports)."""
    return _split_list(network, "ib_ports")


def join_network(own: NetworkFacts, ports: list[IbPort]) -> NetworkFacts:
    """The host's network section: its own part with its RDMA ports."""
    return _joined_list(own, "ib_ports", ports)


def _split_list(section: S, name: str) -> tuple[S, Any]:
    """(the section without its list field `name`, that list): the section itself, not a copy, where it is empty."""
    part = getattr(section, name)
    return (section, part) if not part else (clone(section, **{name: []}), part)


def _joined_list(own: S, name: str, part: list[Any]) -> S:
    """The section with its list field `name` set to `part` (a copy; `own` itself where `part` is empty)."""
    return clone(own, **{name: part}) if part else own
