"""RoCE and NIC firmware agreement (checks/nic_fabric.py) on facts the real gatherers read from sysfs fixture
trees (tests/fixtures/sysfs/roce_healthy, ib_healthy: a FAKE of the kernel's InfiniBand sysfs), each fault
written into a copy; test_fabric_multirank.py fires them in a real run."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

from preflight.checks.nic_health import ports_by_host_group
from preflight.model import RankFacts
from tests.checks.test_nic_health import SYSFS, gathered, nic_findings

NEW = {"NIC005", "NIC006", "NIC007"}
GID_TYPE_3 = "class/infiniband/mlx5_1/ports/1/gid_attrs/types/3"


def tree(tmp_path: Path, name: str, base: str = "roce_healthy", **files: str) -> Path:
    """A copy of a fixture tree with some files rewritten (`files`: path under the root -> text)."""
    copy = shutil.copytree(SYSFS / base, tmp_path / name)
    for path, text in files.items():
        (copy / path).write_text(text + "\n")
    return copy


def found(ranks: list[RankFacts]) -> dict[str, list[str]]:
    return {k: v for k, v in nic_findings(ranks).items() if k in NEW}


def test_the_roce_tree_reads_gid_types_and_firmware(monkeypatch: pytest.MonkeyPatch) -> None:
    facts = gathered(monkeypatch, "roce_healthy")
    port = facts.network.ib_ports[0]
    assert (port.link_layer, port.netdevs, port.hca_type, port.fw_ver, port.board_id) == (
        "Ethernet", ["eth2"], "MT4129", "28.39.1002", "MT_0000000838")
    assert port.gid_types == {0: "IB/RoCE v1", 1: "RoCE v2", 2: "IB/RoCE v1", 3: "RoCE v2"}  # slot 4 empty
    assert gathered(monkeypatch, "ib_healthy").network.ib_ports[0].gid_types == {}  # InfiniBand: no RoCE GIDs


def test_healthy_roce_and_ib_hosts_are_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106"}
    roce = [gathered(monkeypatch, "roce_healthy", f"r{i}", i, **env) for i in range(3)]
    assert nic_findings(roce) == {}
    assert found([gathered(monkeypatch, "roce_healthy", f"r{i}", i) for i in range(2)]) == {}  # NCCL picks v2
    assert found([gathered(monkeypatch, "ib_healthy", f"n{i}", i) for i in range(2)]) == {}


def test_a_gid_index_on_a_roce_v1_gid_or_an_empty_slot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    v1 = tree(tmp_path, "v1", **{GID_TYPE_3: "IB/RoCE v1"})
    assert found([gathered(monkeypatch, v1, NCCL_IB_GID_INDEX="3")]) == {
        "NIC005": ["mlx5_1/1 on node01: NCCL_IB_GID_INDEX=3 is IB/RoCE v1, want RoCE v2"]}
    assert found([gathered(monkeypatch, "roce_healthy", NCCL_IB_GID_INDEX="4")])["NIC005"][0] == (
        "mlx5_0/1 on node01: NCCL_IB_GID_INDEX=4 is an empty GID, want RoCE v2")
    assert found([gathered(monkeypatch, v1, NCCL_IB_GID_INDEX="3", NCCL_IB_ROCE_VERSION_NUM="1")]).get("NIC005") == [
        "mlx5_0/1 on node01: NCCL_IB_GID_INDEX=3 is RoCE v2, want IB/RoCE v1"]  # v1 asked for: v1 is right


def test_no_roce_v2_gid_for_nccl_to_pick(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    only_v1 = tree(tmp_path, "only-v1")
    for index in (1, 3):
        (only_v1 / f"class/infiniband/mlx5_0/ports/1/gid_attrs/types/{index}").unlink()
    assert found([gathered(monkeypatch, only_v1)]) == {"NIC005": [
        "mlx5_0/1 on node01: has no RoCE v2 GID for NCCL to pick (GID types: 0: IB/RoCE v1, 2: IB/RoCE v1)"]}


def test_roce_settings_that_differ_across_hosts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    v1 = tree(tmp_path, "v1", **{GID_TYPE_3: "IB/RoCE v1"})
    env = {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106"}
    ranks = [gathered(monkeypatch, "roce_healthy", "r0", 0, **env),
             gathered(monkeypatch, "roce_healthy", "r1", 1, **env), gathered(monkeypatch, v1, "r2", 2, **env),
             gathered(monkeypatch, "roce_healthy", "r3", 3, NCCL_IB_GID_INDEX="3", NCCL_IB_TC="41")]
    assert found(ranks)["NIC006"] == [
        "RoCE on r2: NCCL_IB_GID_INDEX=3 (IB/RoCE v1/RoCE v2), NCCL_IB_TC=106; most hosts: NCCL_IB_GID_INDEX=3 "
        "(RoCE v2), NCCL_IB_TC=106",
        "RoCE on r3: NCCL_IB_GID_INDEX=3 (RoCE v2), NCCL_IB_TC=41; most hosts: NCCL_IB_GID_INDEX=3 (RoCE v2), "
        "NCCL_IB_TC=106"]


def test_a_roce_setting_differing_across_hosts_is_one_finding_not_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """NCCL_IB_TC (or the GID index) differing between RoCE hosts is NIC006's, with the GID type each host uses:
    ENV003 does not say it again. A difference between ranks of one host, or on hosts without RoCE ports, stays
    ENV003's (NIC006 compares hosts' RoCE settings only)."""
    from preflight.checks.env_agreement import collective_env_drift
    from preflight.registry import JobView

    def env_findings(ranks: list[RankFacts]) -> list[str]:
        return [p.message for p in collective_env_drift(JobView(world_size=len(ranks), ranks=ranks))]

    tc = [gathered(monkeypatch, "roce_healthy", "r0", 0, NCCL_IB_TC="106"),
          gathered(monkeypatch, "roce_healthy", "r1", 1, NCCL_IB_TC="106"),
          gathered(monkeypatch, "roce_healthy", "r2", 2, NCCL_IB_TC="41")]
    assert [m.split(";")[0] for m in found(tc)["NIC006"]] == [
        "RoCE on r2: NCCL_IB_GID_INDEX=unset (RoCE v2), NCCL_IB_TC=41"]
    assert env_findings(tc) == []
    one_host = [gathered(monkeypatch, "roce_healthy", "r0", 0, NCCL_IB_TC="106"),
                gathered(monkeypatch, "roce_healthy", "r0", 1, NCCL_IB_TC="41")]
    assert "NIC006" not in found(one_host) and [m.split(":")[0] for m in env_findings(one_host)] == ["NCCL_IB_TC"]
    ib = [gathered(monkeypatch, "ib_healthy", "n0", 0, NCCL_IB_TC="106"),
          gathered(monkeypatch, "ib_healthy", "n1", 1, NCCL_IB_TC="41")]
    assert "NIC006" not in found(ib) and [m.split(":")[0] for m in env_findings(ib)] == ["NCCL_IB_TC"]


def test_nic_firmware_and_board_per_model_across_hosts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    old = tree(tmp_path, "old", base="ib_healthy", **{"class/infiniband/mlx5_1/fw_ver": "28.36.1010",
                                                      "class/infiniband/mlx5_1/board_id": "DEL0000000036"})
    ranks = [gathered(monkeypatch, "ib_healthy", "n0", 0), gathered(monkeypatch, old, "n1", 1),
             gathered(monkeypatch, "ib_healthy", "n2", 2)]
    assert found(ranks) == {"NIC007": [
        "NIC firmware on n1 (MT4129): mlx5_1 28.36.1010; most MT4129 NICs of the job: 28.39.1002",
        "NIC board id on n1 (MT4129): mlx5_1 DEL0000000036; most MT4129 NICs of the job: MT_0000000838"]}
    assert "NIC007" not in found(ranks[1:2])  # one host: nothing to compare it with


def _on_hosts(facts: RankFacts, *hosts: str) -> list[RankFacts]:
    """`facts` as the first rank of each host, their sections the same objects: as rank 0 holds the ranks of
    hosts that sent a section alike (decoded once, channel/sections.py)."""
    return [msgspec.structs.replace(facts, rank=int(host[1:]), host=host) for host in hosts]


def test_hosts_that_share_a_port_section_are_judged_once_and_each_named(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """NIC007 and NET005 judge each group of hosts with one ports section once (nic_health.ports_by_host_group),
    and still count and name every host of it: two hosts of old firmware among five of the current one."""
    old = tree(tmp_path, "old", base="ib_healthy", **{"class/infiniband/mlx5_0/fw_ver": "28.36.1010",
                                                      "class/infiniband/mlx5_1/fw_ver": "28.36.1010"})
    ranks = [*_on_hosts(gathered(monkeypatch, "ib_healthy"), "n0", "n1", "n2", "n3", "n4"),
             *_on_hosts(gathered(monkeypatch, old), "n5", "n6")]
    assert [group.hosts for group in ports_by_host_group(ranks)] == [["n0", "n1", "n2", "n3", "n4"], ["n5", "n6"]]
    assert found(ranks) == {"NIC007": [
        f"NIC firmware on {host} (MT4129): mlx5_0 28.36.1010, mlx5_1 28.36.1010; most MT4129 NICs of the job: "
        "28.39.1002" for host in ("n5", "n6")]}
    # Five hosts of the old firmware against two: the majority is counted per NIC of each host (10 against 4),
    # not per group (2 against 2, which the larger text, the current firmware, would win).
    flipped = [*_on_hosts(ranks[5], "n0", "n1", "n2", "n3", "n4"), *_on_hosts(ranks[0], "n5", "n6")]
    assert found(flipped) == {"NIC007": [
        f"NIC firmware on {host} (MT4129): mlx5_0 28.39.1002, mlx5_1 28.39.1002; most MT4129 NICs of the job: "
        "28.36.1010" for host in ("n5", "n6")]}
    # A slow port in a section three hosts share: NET005 names it on each of them, in host order.
    slow = _on_hosts(gathered(monkeypatch, "ib_mixed"), "n2", "n0", "n1")
    assert nic_findings(slow)["NET005"] == [
        f"mlx5_1 port 1 on {host} runs at 200 Gb/sec (4X HDR); the host's other ports run at 400 Gb/sec"
        for host in ("n0", "n1", "n2")]
