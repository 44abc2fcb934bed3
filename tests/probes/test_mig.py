"""A rank bound to a MIG instance: the collectives are not attempted on NCCL (BW015), the device probes run.

The CUDA model (tests/helpers/fake_cuda.py) stands in for torch.cuda and NCCL; the process group and its
control group are real gloo groups under it. The model's NCCL would run the collectives (gloo underneath):
the test shows preflight does not ask it to, and says why, naming the rank, host and instance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from preflight.channel.board import Board
from preflight.channel.keys import BOUND
from preflight.model.messages import BoundDevice, BoundRecord
from preflight.probes import mig
from preflight.probes.session import Session
from tests.helpers.fake_cuda import FakeCuda, gpu
from tests.helpers.ranks import plant_env, read_json, spawn_env_ranks
from tests.probes.test_real_node import MODEL, SMALL_FREE, _options, _run_one_rank, model_env

INSTANCE = "MIG-7a1e0000-0000-4000-8000-000000000071"


def _mig_node(local_rank: int) -> FakeCuda:
    """Eight A100s; the one at `local_rank` is seen by CUDA as a MIG 3g.40gb instance (its own MIG- UUID)."""
    devices = [gpu(i, name="NVIDIA A100-SXM4-80GB", free=SMALL_FREE) for i in range(8)]
    devices[local_rank].update(name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", uuid=INSTANCE)
    return FakeCuda(devices, rates={"gemm": 0.002, "copy": 2.0, "host": 1.0})


def test_a_rank_on_a_mig_instance_skips_the_collectives_on_nccl_with_the_reason_and_probes_its_device() -> None:
    model = _mig_node(2)
    outcome = _run_one_rank(model, 2, _options())
    assert outcome.backend == "nccl"
    assert outcome.results == []  # no collective was measured: none was attempted
    (finding,) = [f for f in outcome.findings if f.check_id == "BW015"]
    assert finding.severity.value == "could-not-run"  # asked for and not measured is never a pass
    assert (finding.ranks, finding.hosts) == ([0], ["node3"])
    assert f"rank 0 on node3 ({INSTANCE})" in finding.message and "CUDA IPC" in finding.message
    assert finding.data["mig_instances"] == [{"rank": 0, "host": "node3", "instance": INSTANCE}]
    # nothing of the collectives' size was allocated: 64 KiB buffers never made
    assert not [c for c in model.calls if c.what == "alloc" and c.nbytes == 64 * 1024]
    (row,) = outcome.device_rows  # the instance's own figures still measured; its host link skipped
    assert row.uuid == INSTANCE
    assert {f.name for f in row.figures} >= {"gemm_bf16", "copy"}


def test_a_whole_gpu_still_measures_its_collectives() -> None:
    """The same node with GPU 2 whole: the collective is measured and no BW015 (the rule keys on MIG only)."""
    model = FakeCuda([gpu(i, name="NVIDIA A100-SXM4-80GB", free=SMALL_FREE) for i in range(8)],
                     rates={"gemm": 0.002, "copy": 2.0, "host": 1.0})
    outcome = _run_one_rank(model, 2, _options())
    assert [(r.op, r.size_bytes) for r in outcome.results] == [("all_reduce", 64 * 1024)]
    assert not [f for f in outcome.findings if f.check_id == "BW015"]


class _Board:
    """The store's records as mig_ranks reads them: rank -> BoundRecord."""

    def __init__(self, records: dict[int, BoundRecord]) -> None:
        self.records = records

    def read(self, key: Any, rank: int) -> BoundRecord | None:
        assert key == BOUND.at(rank)
        return self.records.get(rank)


def test_every_rank_names_the_same_mig_ranks_and_gloo_names_none(monkeypatch: Any) -> None:
    """Ranks 1 and 3 of 4 on MIG instances (two hosts): every rank reads the same list; on gloo there is none."""
    monkeypatch.setattr(mig, "barrier", lambda group, deadline: None)
    records = {r: BoundRecord(f"node{r // 2}", "nccl", BoundDevice(0, uuid=f"MIG-{r}" if r % 2 else f"GPU-{r}"))
               for r in range(4)}
    lists = []
    for rank in range(4):
        world = type("W", (), {"world_size": 4, "rank": rank})()  # the two fields mig_ranks reads
        session = Session(world=world, plan=None, store=None, device=None, dtype=None, control=None, groups={},
                          timeout_s=0.0, backend="nccl")
        monkeypatch.setattr(Session, "board", property(lambda self: _Board(records)))
        lists.append(mig.mig_ranks(session, 0.0))
    assert lists[0] == [mig.MigRank(1, "node0", "MIG-1"), mig.MigRank(3, "node1", "MIG-3")]
    assert all(found == lists[0] for found in lists)
    session.backend = "gloo"
    assert mig.mig_ranks(session, 0.0) == []


def _board_with(records: dict[int, BoundRecord]) -> Board:
    board = Board(dist.HashStore())
    for rank, record in records.items():
        board.put(BOUND.at(rank), record)
    return board


def test_no_nccl_communicator_is_made_eagerly_when_any_rank_is_on_a_mig_instance() -> None:
    """Eager init (device_id) is a collective: every rank decides alike from every rank's bound device."""
    whole = {r: BoundRecord("node0", "nccl", BoundDevice(r, uuid=f"GPU-{r}")) for r in range(2)}
    assert mig.eager_nccl(_board_with(whole), 2, timeout_s=5.0)
    one_mig = {**whole, 1: BoundRecord("node0", "nccl", BoundDevice(0, uuid=INSTANCE))}
    assert not mig.eager_nccl(_board_with(one_mig), 2, timeout_s=5.0)
    # a rank that never bound by the bound: eager as before (the set-up's deadline names it)
    assert mig.eager_nccl(_board_with({0: one_mig[1]}), 2, timeout_s=0.2)


@pytest.mark.timeout(600)  # two rank processes on shared cores; a does-not-hang bound
def test_two_ranks_one_on_a_mig_instance_neither_attempts_the_collectives_and_both_probe_their_gpus(
        tmp_path: Path) -> None:
    """Rank 1 of 2 is on a MIG instance, rank 0 on a whole GPU: both skip every collective alike (no rank
    left waiting in one), the run ends could-not-run (exit 4) with BW015 naming rank 1, and both devices
    are measured."""
    plants = {rank: MODEL for rank in range(2)}
    env = {**plant_env(tmp_path, plants), **model_env(tmp_path, 0, mig={"1": INSTANCE})}
    out = tmp_path / "report.json"
    runs = spawn_env_ranks(2, ["--ops", "all_reduce", "--sizes", "64KiB", "--device-budget", "0.5",
                               "--json", str(out)], common_env=env, timeout=480)
    assert out.exists(), "\n".join(r.stdout + r.stderr for r in runs.values())
    report = read_json(out)
    assert {r.returncode for r in runs.values()} == {4}
    (finding,) = [f for f in report["findings"] if f["check_id"] == "BW015"]
    assert finding["ranks"] == [1] and INSTANCE in finding["message"]
    assert report["meta"]["backend"] == "nccl" and report["probes"] == []  # no collective row
    assert sorted(d["rank"] for d in report["device_probes"]) == [0, 1]
