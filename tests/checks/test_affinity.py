"""AFF001-AFF003: ranks bound by real `taskset` against a fake sysfs of 2 NUMA nodes x 4 GPUs x 2 NICs.

The sysfs tree is a FAKE (tests/fixtures/sysfs/numa_2x4, see its README): this machine has no GPU
and no RDMA NIC. Its NUMA nodes' cpulists map onto this machine's two real CPUs (node 0: CPU 0,
node 1: CPU 1), so a rank's real affinity, set by `taskset -c` before Python starts, is on one
node or the other. The GPUs' bus ids come from the NVML replay (tests/fixtures/nvml), the one
NVML boundary: CUDA_VISIBLE_DEVICES=0,1,4,5 binds ranks 0-3 to GPUs 0 and 1 (NUMA 0, mlx5_0
on their switch) and 4 and 5 (NUMA 1, mlx5_1 on their switch).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.checks.test_config_multirank import by_id, run_ok
from tests.helpers.facts import rank_facts, run
from tests.helpers.ranks import Placement, spawn_env_ranks
from tests.helpers.tools import require

FIXTURES = Path(__file__).parents[1] / "fixtures"
SYSFS = FIXTURES / "sysfs" / "numa_2x4"
NVML = FIXTURES / "nvml" / "healthy_h100x8.json"
NEAR = {0: "0", 1: "0", 2: "1", 3: "1"}  # each rank's GPU's node's CPU
RUNS = int(os.environ.get("PREFLIGHT_AFFINITY_RUNS", "1"))  # "10 of 10": PREFLIGHT_AFFINITY_RUNS=10


def _run(tmp: Path, cpus: dict[int, str], env: dict[int, dict[str, str]] | None = None) -> dict:
    require(shutil.which("taskset") is not None, "taskset is not installed: apt-get install util-linux")
    require(len(os.sched_getaffinity(0)) >= 2 and {0, 1} <= os.sched_getaffinity(0), "needs CPUs 0 and 1")
    place = {r: Placement(env=(env or {}).get(r, {}), wrap=("taskset", "-c", cpus[r])) for r in range(4)}
    out = tmp / "report.json"
    runs = spawn_env_ranks(4, ["--json", str(out), "--sysfs-root", str(SYSFS), "--skip", "probe,network",
                               "--timeout", "90"], place=place, timeout=240,
                           common_env={"PREFLIGHT_NVML_REPLAY": str(NVML), "CUDA_VISIBLE_DEVICES": "0,1,4,5"})
    return run_ok(runs, out)


def _aff(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["check_id"].startswith("AFF")]


@pytest.mark.parametrize("attempt", range(RUNS))
def test_a_rank_on_the_remote_socket_is_named_with_both_cpu_lists(tmp_path: Path, attempt: int) -> None:
    report = _run(tmp_path, {**NEAR, 2: "0"})  # rank 2's GPU is on node 1 (CPU 1); it runs on CPU 0
    [finding] = _aff(report)
    assert finding["check_id"] == "AFF001" and finding["ranks"] == [2], _aff(report)
    assert finding["data"]["cpus"] == "0" and finding["data"]["gpu_cpus"] == "1"
    assert finding["data"]["gpu_bus_id"] == "0000:9a:00.0" and finding["data"]["gpu_numa_node"] == 1
    assert "CPUs 0 are all off its GPU's NUMA node 1" in finding["message"] and "node 1's CPUs 1" in finding["message"]


@pytest.mark.parametrize("attempt", range(RUNS))
def test_correct_binding_is_silent(tmp_path: Path, attempt: int) -> None:
    assert _aff(_run(tmp_path, NEAR)) == []


@pytest.mark.parametrize("attempt", range(RUNS))
def test_nccl_ib_hca_naming_the_far_nic_is_named(tmp_path: Path, attempt: int) -> None:
    report = _run(tmp_path, NEAR, env={0: {"NCCL_IB_HCA": "=mlx5_1"}})  # rank 0's GPU 0 sits beside mlx5_0
    [finding] = _aff(report)
    assert finding["check_id"] == "AFF002" and finding["ranks"] == [0], _aff(report)
    assert finding["data"]["nics"] == ["mlx5_1"] and finding["data"]["local_nics"] == ["mlx5_0"]
    assert "NCCL_IB_HCA==mlx5_1" in finding["message"]
    assert not by_id(report, "RUN005"), by_id(report, "RUN005")  # every gatherer ran


def test_one_rank_left_unbound_among_bound_ones_overlaps_them(tmp_path: Path) -> None:
    report = _run(tmp_path, {**NEAR, 3: "0,1"})  # rank 3 may run anywhere, its siblings are pinned
    [finding] = _aff(report)
    assert finding["check_id"] == "AFF003" and finding["ranks"] == [0, 1, 2, 3], _aff(report)
    assert "rank 0 0 and rank 3 0-1" in finding["message"] and finding["data"]["cpus"]["3"] == "0-1"


def _cpus(rank: int, cpus: list[int]) -> object:
    return rank_facts(rank, "n1", world_size=3, placement={"affinity": {"cpus": cpus}})


def test_aff003_names_partly_overlapping_sets_not_equal_or_disjoint_ones() -> None:
    assert run("AFF003", [_cpus(0, [0, 1]), _cpus(1, [0, 1]), _cpus(2, [0, 1])]) == []  # unbound alike
    assert run("AFF003", [_cpus(0, [0, 1]), _cpus(1, [2, 3]), _cpus(2, [4])]) == []  # one set each
    [finding] = run("AFF003", [_cpus(0, [0, 1]), _cpus(1, [1, 2]), _cpus(2, [4])])
    assert finding.ranks == [0, 1] and "rank 0 0-1 and rank 1 1-2" in finding.message


@given(st.lists(st.lists(st.integers(0, 5), max_size=4), min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_aff003_names_exactly_the_ranks_of_partly_overlapping_pairs(cpu_lists: list[list[int]]) -> None:
    """Against every pair looked at by hand: AFF003 skips a node whose sets are one or disjoint without
    pairing them (16,384 nodes of 8 ranks at 131,072), and that must not hide a pair."""
    ranks = [rank_facts(r, "n1", world_size=len(cpu_lists), placement={"affinity": {"cpus": cpus}})
             for r, cpus in enumerate(cpu_lists)]
    sets = {r: set(cpus) for r, cpus in enumerate(cpu_lists) if cpus}
    expected = sorted({r for a in sets for b in sets if a != b and sets[a] & sets[b] and sets[a] != sets[b]
                       for r in (a, b)})
    found = run("AFF003", ranks)
    assert [f.ranks for f in found] == ([expected] if expected else [])
