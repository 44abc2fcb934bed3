"""The host parts of a rank's health and placement (model/host_parts.py): split off and joined back."""

from __future__ import annotations

from preflight.model import GpuHealth, HealthFacts, IbCounters, IbPort, Interface, NetworkFacts
from preflight.model.host_parts import (
    NO_BUILD,
    join_health,
    join_network,
    join_placement,
    split_health,
    split_network,
    split_placement,
)
from preflight.model.placement_facts import AffinityFacts, BuildFacts, DistBuild, PlacementFacts


def test_split_and_join_are_inverses_and_the_own_part_holds_none_of_the_hosts() -> None:
    health = HealthFacts(nvml="ok", bound_index=3, gpus=[GpuHealth(index=3, temperature_c=41)],
                         ib_counters=[IbCounters("mlx5_0", 1, {"symbol_error": 2})])
    own, counters = split_health(health)
    assert own.ib_counters == [] and counters == health.ib_counters and own.gpus == health.gpus
    assert join_health(own, counters) == health
    placement = PlacementFacts(build=BuildFacts(taken=True, dists=[DistBuild(name="torch", version="2.13.0")]),
                               affinity=AffinityFacts(cpus=[3], numa_cpus={0: [0, 1, 2, 3]}))
    own_place, numa_cpus, build = split_placement(placement)
    assert own_place.affinity.numa_cpus == {} and own_place.build == NO_BUILD and own_place.affinity.cpus == [3]
    assert numa_cpus == {0: [0, 1, 2, 3]} and build == placement.build
    assert join_placement(own_place, numa_cpus, build) == placement
    network = NetworkFacts(interfaces=[Interface(name="ib0", up=True, addresses=["10.1.0.7"])], loopback_scope="b-7",
                           ib_ports=[IbPort("mlx5_0", 1, state="ACTIVE", rate_gbps=400.0, fw_ver="28.39.1002")])
    own_network, ports = split_network(network)
    assert own_network.ib_ports == [] and ports is network.ib_ports and own_network.interfaces == network.interfaces
    assert join_network(own_network, ports) == network


def test_a_rank_without_host_parts_is_its_own_part_unchanged() -> None:
    """A CPU rank (no counters, no NUMA nodes read, no fingerprint taken): nothing is copied."""
    health, placement, network = HealthFacts(), PlacementFacts(), NetworkFacts(interfaces=[])
    assert split_health(health)[0] is health and join_health(health, []) is health
    assert split_placement(placement)[0] is placement and join_placement(placement, {}, NO_BUILD) is placement
    assert split_network(network)[0] is network and join_network(network, []) is network
