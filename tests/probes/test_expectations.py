"""Expectations per hardware: fixture facts map to the profile chosen, and a group below it is named."""

from __future__ import annotations

from preflight.model import ProbeResult, RankFacts
from preflight.probes.expectations import PROFILE_MIN_BYTES, assign, judge_profiles, profile_for
from tests.helpers.facts import rank_facts

BIG = PROFILE_MIN_BYTES


def _gpu_host(r: int, host: str, name: str, version: int, links: int) -> RankFacts:
    gpus = [{"index": i, "name": name, "nvlink_active": links, "nvlink_version": version,
             "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "uuid": f"GPU-{host}-{i}"} for i in range(8)]
    return rank_facts(r, host, world_size=16, local_world_size=8, gpus=gpus)


def _ib_host(r: int, host: str, gbps: float | None, rate: str = "", link_layer: str = "InfiniBand",
             env: dict[str, str] | None = None) -> RankFacts:
    ports = [] if gbps is None else [{"device": "mlx5_0", "port": 1, "state": "4: ACTIVE", "rate": rate,
                                      "rate_gbps": gbps, "link_layer": link_layer, "netdevs": ["ibp0"]}]
    return rank_facts(r, host, world_size=16, local_world_size=8, env=env or {}, network={
        "chosen_interface": {"name": "eth0"}, "interfaces": [{"name": "eth0", "speed_mbps": 100000}],
        "ib_ports": ports})


def _devices(host: str) -> dict[int, str]:
    return {r: f"GPU-{host}-{r}" for r in range(8)}


def test_8x_h100_nvlink4_maps_to_the_h100_profile() -> None:
    facts = {r: _gpu_host(r, "n1", "NVIDIA H100 80GB HBM3", 4, 18) for r in range(8)}
    profile = profile_for(list(range(8)), facts, _devices("n1"), "nccl")
    assert profile is not None and profile.name == "H100 SXM NVLink4 x18"
    assert profile.line_gbps == 450.0 and profile.expected_gbps == 369.0


def test_8x_a100_nvlink3_maps_to_the_a100_profile() -> None:
    facts = {r: _gpu_host(r, "n1", "NVIDIA A100-SXM4-80GB", 3, 12) for r in range(8)}
    profile = profile_for(list(range(8)), facts, _devices("n1"), "nccl")
    assert profile is not None and profile.name == "A100 SXM NVLink3 x12" and profile.expected_gbps == 231.0


def test_fewer_active_links_than_the_model_has_get_no_healthy_profile() -> None:
    # An H100 with 9 of 18 NVLinks up is not held to half a profile: it gets none (and nominal says x9).
    facts = {r: _gpu_host(r, "n1", "NVIDIA H100 80GB HBM3", 4, 9) for r in range(8)}
    assert profile_for(list(range(8)), facts, _devices("n1"), "nccl") is None


def test_ndr_and_hdr_ports_map_to_their_profiles_and_the_slower_bounds_the_group() -> None:
    ndr = {r: _ib_host(r, f"n{r}", 400.0, "400 Gb/sec (4X NDR)") for r in (0, 8)}
    profile = profile_for([0, 8], ndr, {}, "nccl")
    assert profile is not None and profile.name == "InfiniBand NDR 400 Gb/s per NIC" and profile.expected_gbps == 46.0
    mixed = {0: ndr[0], 8: _ib_host(8, "n8", 200.0, "200 Gb/sec (4X HDR)")}
    profile = profile_for([0, 8], mixed, {}, "nccl")
    assert profile is not None and profile.name == "InfiniBand HDR 200 Gb/s per NIC" and profile.expected_gbps == 23.0


def test_ethernet_only_roce_disabled_ib_and_gloo_get_no_profile() -> None:
    ethernet = {r: _ib_host(r, f"n{r}", None) for r in (0, 8)}
    assert profile_for([0, 8], ethernet, {}, "nccl") is None
    roce = {r: _ib_host(r, f"n{r}", 400.0, "400 Gb/sec", link_layer="Ethernet") for r in (0, 8)}
    assert profile_for([0, 8], roce, {}, "nccl") is None
    disabled = {r: _ib_host(r, f"n{r}", 400.0, env={"NCCL_IB_DISABLE": "1"}) for r in (0, 8)}
    assert profile_for([0, 8], disabled, {}, "nccl") is None
    ndr = {r: _ib_host(r, f"n{r}", 400.0) for r in (0, 8)}
    assert profile_for([0, 8], ndr, {}, "gloo") is None  # CPU/gloo: no profile is invented


def _result(dim: str, ranks: list[int], busbw: float, size: int = BIG, op: str = "all_reduce") -> ProbeResult:
    return ProbeResult(dim, op, size, 0, ranks, ["n1"] * len(ranks), 1.0, busbw, busbw)


def test_a_node_at_half_nvlink_speed_is_named_though_its_siblings_are_as_slow() -> None:
    facts = [_gpu_host(r, "n1", "NVIDIA H100 80GB HBM3", 4, 18) for r in range(8)]
    results = [_result("tp", list(range(8)), 185.0), _result("tp", list(range(8)), 180.0, op="all_to_all")]
    findings = judge_profiles(results, facts, _devices("n1"), "nccl", {}, strict=False)
    assert [(f.check_id, f.severity.value) for f in findings] == [("BW011", "warn")]
    assert findings[0].data["expected_source"] == "profile H100 SXM NVLink4 x18"
    assert results[1].expected_gbps is None  # all_to_all has no profile
    strict = judge_profiles(results, facts, _devices("n1"), "nccl", {}, strict=True)
    assert [(f.check_id, f.severity.value) for f in strict] == [("BW007", "error")]
    healthy = [_result("tp", list(range(8)), 360.0)]
    assert judge_profiles(healthy, facts, _devices("n1"), "nccl", {}, strict=False) == []


def test_every_figure_says_where_its_expectation_came_from() -> None:
    facts = [_gpu_host(r, "n1", "NVIDIA H100 80GB HBM3", 4, 18) for r in range(8)]
    results = [_result("tp", [0, 1], 300.0), _result("pp", [0, 2], 300.0), _result("tp", [0, 1], 1.0, size=1 << 20)]
    assign(results, facts, _devices("n1"), "nccl", {"pp": 100.0})
    assert [(r.expected_gbps, r.expected_source) for r in results] == [
        (369.0, "profile H100 SXM NVLink4 x18"), (100.0, "--expect"), (None, "")]  # small sizes: no profile
