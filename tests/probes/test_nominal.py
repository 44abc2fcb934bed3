"""Nominal link rates for probe groups, from hand-written facts (NVLink via NVML, IB via sysfs)."""

from __future__ import annotations

from preflight.model import ProbeResult, RankFacts
from preflight.probes.nominal import annotate, group_link
from tests.helpers.facts import rank_facts


def rank(r: int, host: str, *, nvlinks: int = 0, version: int = 4, chosen: str = "ib0", ib_gbps: float | None = None,
         speed_mbps: int = 0) -> RankFacts:
    return rank_facts(r, host, world_size=8, local_world_size=4,
                      gpus=[{"index": i, "nvlink_active": nvlinks, "nvlink_version": version} for i in range(4)],
                      network={
                          "chosen_interface": {"name": chosen},
                          "interfaces": [{"name": chosen, "speed_mbps": speed_mbps}],
                          "ib_ports": [] if ib_gbps is None else [{"device": "mlx5_0", "port": 1,
                                                                   "rate": f"{ib_gbps:g} Gb/sec",
                                                                   "rate_gbps": ib_gbps, "netdevs": [chosen]}],
                      })


def test_group_inside_a_host_uses_nvlink() -> None:
    facts = {r: rank(r, "n1", nvlinks=18) for r in range(4)}
    link = group_link([0, 1, 2, 3], facts)
    assert link is not None and link.gbps == 450.0 and link.source == "NVLink4 x18"


def test_group_across_hosts_uses_the_slowest_ib_port() -> None:
    facts = {0: rank(0, "n1", ib_gbps=400), 4: rank(4, "n2", ib_gbps=200)}
    link = group_link([0, 4], facts)
    assert link is not None and link.gbps == 25.0 and "mlx5_0 port 1 200 Gb/sec" in link.source


def test_ethernet_speed_when_there_is_no_ib() -> None:
    facts = {0: rank(0, "n1", chosen="eth0", speed_mbps=10000), 4: rank(4, "n2", chosen="eth0", speed_mbps=25000)}
    link = group_link([0, 4], facts)
    assert link is not None and link.gbps == 1.25


def test_unknown_rates_give_no_fraction() -> None:
    no_nvlink = {r: rank(r, "n1") for r in range(2)}
    assert group_link([0, 1], no_nvlink) is None
    unknown_speed = {0: rank(0, "n1", chosen="eth0"), 4: rank(4, "n2", chosen="eth0", speed_mbps=10000)}
    assert group_link([0, 4], unknown_speed) is None
    assert group_link([0, 4], {0: rank(0, "n1", ib_gbps=400)}) is None  # a member's facts are missing


def test_annotate_sets_rate_and_source_per_result() -> None:
    facts = [rank(0, "n1", ib_gbps=400), rank(4, "n2", ib_gbps=400)]
    result = ProbeResult("dp", "all_reduce", 1 << 20, 0, [0, 4], ["n1", "n2"], 0.001, 40.0, 40.0)
    annotate([result], facts)
    assert result.nominal_gbps == 50.0 and result.nominal_source.startswith("mlx5_0")
