"""RDMA port checks on facts gathered from sysfs fixture trees (tests/fixtures/sysfs/, a FAKE of the
kernel's InfiniBand sysfs: no RDMA NIC exists on CI). The real gatherers read the trees;
test_health_multirank.py fires the checks in a real run, with counters bumped between the reads.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from preflight.model import IbCounters, IbPort, RankFacts, World
from preflight.registry import CheckContext, JobView, all_checks
from preflight.steps.gather import GatherOptions, links, nic_health
from preflight.steps.gather.nic_health import select_ports
from preflight.steps.recheck import increases

SYSFS = Path(__file__).parents[1] / "fixtures" / "sysfs"
NIC_CHECKS = [spec for spec in all_checks() if spec.tag == "nic" and spec.scope != "engine"]


def gathered(monkeypatch: pytest.MonkeyPatch, tree: str | Path, host: str = "node01", rank: int = 0,
             **env: str) -> RankFacts:
    """A rank's facts after the network and nic-health gatherers read a sysfs tree."""
    for name in ("NCCL_IB_HCA", "NCCL_NET_GDR_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    facts = RankFacts(rank=rank, host=host, world=World("env", rank, 4, host=host), env=dict(env))
    root = str(tree if isinstance(tree, Path) else SYSFS / tree)
    facts.network.ib_ports = links.read_ib_ports(root)
    nic_health.gather(facts, GatherOptions(sysfs_root=root))
    return facts


def nic_findings(ranks: list[RankFacts]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for spec in NIC_CHECKS:
        if spec.scope == "local":
            problems = [p for f in ranks for p in spec.func(f, CheckContext(world_size=len(ranks)))]
        else:
            problems = list(spec.func(JobView(world_size=len(ranks), ranks=ranks)))
        if problems:
            found[spec.id] = [p.message for p in problems]
    return found


def test_healthy_ports_are_silent_even_with_gdr_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = gathered(monkeypatch, "ib_healthy", NCCL_NET_GDR_LEVEL="PHB")
    assert facts.health.nccl_ports == ["mlx5_0/1", "mlx5_1/1"] and facts.health.peermem is True
    assert facts.health.ib_counters[0].counters["symbol_error"] == 0 and len(facts.health.ib_counters[0].counters) == 8
    assert nic_findings([facts, gathered(monkeypatch, "ib_healthy", "node02", 1)]) == {}


def test_each_fault_tree_fires_its_check(monkeypatch: pytest.MonkeyPatch) -> None:
    mixed = nic_findings([gathered(monkeypatch, "ib_mixed")])
    assert mixed == {"NET005": ["mlx5_1 port 1 on node01 runs at 200 Gb/sec (4X HDR); the host's other ports run "
                                "at 400 Gb/sec"],
                     "NIC003": ["mlx5_2/1 on node01 is Ethernet; its sibling ports are InfiniBand"]}
    noisy = nic_findings([gathered(monkeypatch, "ib_noisy", NCCL_NET_GDR_LEVEL="SYS")])
    assert noisy == {"NIC002": ["mlx5_0/1 on node01 has large error counts: symbol_error 5000"],
                     "NIC004": ["NCCL_NET_GDR_LEVEL=SYS but nvidia_peermem is not loaded on node01 "
                                "(dma-buf support not verified)"]}
    assert nic_findings([gathered(monkeypatch, "ib_noisy", NCCL_NET_GDR_LEVEL="LOC")]).keys() == {"NIC002"}
    down = nic_findings([gathered(monkeypatch, "ib_port_down")])
    assert down == {"NET002": ["mlx5_1 port 1 on node01 is DOWN / Polling (want ACTIVE / LinkUp)"]}


def test_nccl_ib_hca_decides_which_ports_count(monkeypatch: pytest.MonkeyPatch) -> None:
    only_good = gathered(monkeypatch, "ib_port_down", NCCL_IB_HCA="mlx5_0")
    assert only_good.health.nccl_ports == ["mlx5_0/1"] and nic_findings([only_good]) == {}
    assert nic_findings([gathered(monkeypatch, "ib_port_down", NCCL_IB_HCA="^mlx5_0")]).keys() == {"NET002"}
    assert nic_findings([gathered(monkeypatch, "ib_mixed", NCCL_IB_HCA="=mlx5_0,mlx5_2")]).keys() == {"NIC003"}


def test_ib_hca_syntax() -> None:
    ports = [IbPort("mlx5_0", 1, state="ACTIVE"), IbPort("mlx5_0", 2, state="DOWN"),
             IbPort("mlx5_10", 1, state="ACTIVE"), IbPort("mlx4_0", 1, state="ACTIVE")]
    keys = lambda spec: [f"{p.device}/{p.port}" for p in select_ports(spec, ports)]  # noqa: E731
    assert keys(None) == keys("") == ["mlx5_0/1", "mlx5_10/1", "mlx4_0/1"]  # unset: every ACTIVE port
    assert keys("mlx5") == ["mlx5_0/1", "mlx5_0/2", "mlx5_10/1"]  # prefixes
    assert keys("=mlx5_0") == ["mlx5_0/1", "mlx5_0/2"]  # exact
    assert keys("mlx5_0:2") == ["mlx5_0/2"]  # one port
    assert keys("^mlx5") == ["mlx4_0/1"]  # exclusion


def test_counter_increase_between_two_reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tree = tmp_path / "sys"
    shutil.copytree(SYSFS / "ib_healthy", tree)
    facts = gathered(monkeypatch, tree)
    counter = tree / "class/infiniband/mlx5_1/ports/1/counters/port_rcv_errors"
    counter.write_text("17\n")  # the test-side bump
    after = nic_health.read_counters(str(tree), facts.network.ib_ports)
    assert increases(facts.health.ib_counters, after) == [{"port": "mlx5_1/1", "counters": {"port_rcv_errors": 17}}]
    assert increases(after, after) == []
    reset = [IbCounters("mlx5_0", 1, {"symbol_error": 3})]  # counters cleared in between: no increase
    assert increases([IbCounters("mlx5_0", 1, {"symbol_error": 9})], reset) == []
