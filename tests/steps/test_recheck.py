"""The post-probe step (preflight/steps/recheck.py) over a real c10d TCPStore: second counter reads
and XID drains published by "followers", compared by rank 0; --skip gpu / nic leave theirs out.

Facts come from the real gatherers on the two fakes: an NVML replay fixture and a sysfs tree copy."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from torch.distributed import TCPStore

from preflight.lib import nvml_source
from preflight.model import RankFacts, World
from preflight.options import RunOptions
from preflight.steps import recheck
from preflight.steps.gather import GatherOptions, gpu_health, gpus, links, nic_health

FIXTURES = Path(__file__).parents[1] / "fixtures"


def facts_of(monkeypatch: pytest.MonkeyPatch, rank: int, host: str, sysfs: Path, visible: str) -> RankFacts:
    monkeypatch.setenv(nvml_source.REPLAY_VARIABLE, str(FIXTURES / "nvml" / "xid_events.json"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.delenv("NCCL_IB_HCA", raising=False)
    facts = RankFacts(rank=rank, host=host, world=World("env", rank, 2, host=host))
    options = GatherOptions(sysfs_root=str(sysfs))
    for gather in (gpus.gather, gpu_health.gather):
        gather(facts, options)
    facts.network.ib_ports = links.read_ib_ports(str(sysfs))
    nic_health.gather(facts, options)
    return facts


@pytest.mark.parametrize("skip", [[], ["nic"], ["gpu"]])
def test_increases_and_xids_reach_rank_0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, skip: list[str]) -> None:
    trees = {host: shutil.copytree(FIXTURES / "sysfs" / "ib_healthy", tmp_path / host) for host in ("n0", "n1")}
    lead = facts_of(monkeypatch, 0, "n0", trees["n0"], "2")  # GPU 2: no XIDs queued
    follower = facts_of(monkeypatch, 1, "n1", trees["n1"], "3")  # GPU 3: XIDs 74, 74, 48 queued
    (trees["n1"] / "class/infiniband/mlx5_0/ports/1/counters/symbol_error").write_text("5\n")
    server = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10), wait_for_workers=False)
    recheck.publish_after(server, follower, str(trees["n1"]))  # what rank 1 does after its probes
    findings = recheck.lead(server, lead, [lead, follower],
                            RunOptions.build(sysfs_root=str(trees["n0"]), check_timeout_s=5, skip=skip))
    got = {(f.check_id, tuple(f.ranks), tuple(f.hosts), f.message) for f in findings}
    want = {("GPU040", (1,), ("n1",), "GPU 3 of rank 1 on n1 raised XID 48 (double-bit ECC error); "
                                      "XID 74 (NVLink error) x2 during the run"),
            ("NIC001", (1,), ("n1",), "mlx5_0/1 on n1: error counters increased during the run: symbol_error +5")}
    assert got == {w for w in want if w[0] != {"gpu": "GPU040", "nic": "NIC001"}.get(skip[0] if skip else "")}
