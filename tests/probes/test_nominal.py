"""Nominal link rates for probe groups, from hand-written facts (NVLink via NVML, IB via sysfs)."""

from __future__ import annotations

from preflight.model import ProbeResult, RankFacts
from preflight.probes.nominal import annotate, group_link
from tests.helpers.facts import rank_facts


def rank(r: int, host: str, *, nvlinks: int = 0, version: int = 4, chosen: str = "ib0", ib_gbps: float | None = None,
         speed_mbps: int = 0, gpus: list[dict] | None = None) -> RankFacts:
    return rank_facts(r, host, world_size=8, local_world_size=4,
                      gpus=gpus or [{"index": i, "nvlink_active": nvlinks, "nvlink_version": version,
                                     "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "uuid": f"GPU-{i}"}
                                    for i in range(4)],
                      network={
                          "chosen_interface": {"name": chosen},
                          "interfaces": [{"name": chosen, "speed_mbps": speed_mbps}],
                          "ib_ports": [] if ib_gbps is None else [{"device": "mlx5_0", "port": 1,
                                                                   "rate": f"{ib_gbps:g} Gb/sec",
                                                                   "rate_gbps": ib_gbps, "netdevs": [chosen]}],
                      })


def test_group_inside_a_host_uses_nvlink() -> None:
    facts = {r: rank(r, "n1", nvlinks=18) for r in range(4)}
    devices = {r: f"0000:{0x18 + r:02X}:00.0" for r in range(4)}  # torch's 4-digit domain matches NVML's 8
    link = group_link([0, 1, 2, 3], facts, devices)
    assert link is not None and link.gbps == 450.0 and link.source == "NVLink4 x18"


def test_a_ranks_gpu_is_matched_by_bus_id_or_uuid_never_by_local_rank() -> None:
    # NVML index order is not CUDA's: rank 0 (LOCAL_RANK 0) runs on the GPU NVML lists last.
    gpus = [{"index": 0, "nvlink_active": 0, "nvlink_version": 0, "pci_bus_id": "00000000:18:00.0", "uuid": "GPU-a"},
            {"index": 1, "nvlink_active": 12, "nvlink_version": 3, "pci_bus_id": "00000000:2A:00.0", "uuid": "GPU-b"}]
    facts = {r: rank(r, "n1", gpus=gpus) for r in range(2)}
    link = group_link([0, 1], facts, {0: "GPU-b", 1: "00000000:2a:00.0"})
    assert link is not None and link.source == "NVLink3 x12" and link.gbps == 300.0
    assert group_link([0, 1], facts) is None  # no bound device and two GPUs: unknown, not LOCAL_RANK's


def test_group_across_hosts_uses_the_slowest_ib_port() -> None:
    facts = {0: rank(0, "n1", ib_gbps=400), 4: rank(4, "n2", ib_gbps=200)}
    link = group_link([0, 4], facts)
    assert link is not None and link.gbps == 25.0 and "mlx5_0 port 1 200 Gb/sec" in link.source


def test_nccl_cross_host_nominal_is_the_rdma_port_nccl_would_use_not_the_socket_interface() -> None:
    ports = [{"device": "mlx5_0", "port": 1, "state": "4: ACTIVE", "rate": "400 Gb/sec (4X NDR)", "rate_gbps": 400,
              "netdevs": ["ibp0"]},
             {"device": "mlx5_1", "port": 1, "state": "1: DOWN", "rate": "400 Gb/sec (4X NDR)", "rate_gbps": 400},
             {"device": "mlx5_2", "port": 1, "state": "4: ACTIVE", "rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200}]

    def host(r: int, name: str, env: dict[str, str]) -> RankFacts:
        return rank_facts(r, name, world_size=8, local_world_size=4, env=env, network={
            "chosen_interface": {"name": "eth0"}, "interfaces": [{"name": "eth0", "speed_mbps": 25000}],
            "ib_ports": ports})

    facts = {0: host(0, "n1", {}), 4: host(4, "n2", {})}
    link = group_link([0, 4], facts, backend="nccl")
    assert link is not None and link.gbps == 50.0 and "mlx5_0 port 1" in link.source and "2 usable" in link.source
    assert group_link([0, 4], facts, backend="gloo").gbps == 3.125  # gloo runs over eth0's TCP
    only_hdr = {r: host(r, n, {"NCCL_IB_HCA": "=mlx5_2"}) for r, n in ((0, "n1"), (4, "n2"))}
    assert group_link([0, 4], only_hdr, backend="nccl").gbps == 25.0
    excluded = {r: host(r, n, {"NCCL_IB_HCA": "^mlx5_0,mlx5_2"}) for r, n in ((0, "n1"), (4, "n2"))}
    assert group_link([0, 4], excluded, backend="nccl").gbps == 3.125  # no usable RDMA port: sockets


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
