"""device_probes.measure and lead on a real one-rank gloo group and a real c10d store, the GPU faked at its boundary.

What runs here is the rank's side (a barrier, the family in a bounded thread, the report
through the store and the codec) and rank 0's (gather, judge, findings, one outcome per device
check); a device that never finishes its work is could-not-run, never a pass.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.distributed import HashStore

from preflight.channel import keys
from preflight.channel.board import Board
from preflight.model import World
from preflight.options import RunOptions
from preflight.probes.device import run as device_probes
from preflight.probes.session import BoundDevice
from tests.helpers.fake_device import FakeDevice

WATCH = SimpleNamespace(dead=lambda: {}, abort_reason=lambda: "")


@pytest.fixture
def session() -> Iterator[Any]:
    """Rank 0 of 1 on gloo, bound (as the session binds) to a GPU the fake device answers for."""
    store = HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    world = World(launcher="env", rank=0, world_size=1, local_rank=0, local_world_size=1, host="node7")
    bound = BoundDevice(0, "NVIDIA H100 80GB HBM3", "00000000:18:00.0", "GPU-0000-1111")
    try:
        yield SimpleNamespace(world=world, bound=bound, device=torch.device("cuda", 0), kind="cuda", store=store,
                              board=Board(store), control=dist.group.WORLD, enter_device=lambda: None,
                              timeout_s=10.0, cuda=None, abandoned=False)
    finally:
        dist.destroy_process_group()


def test_a_rank_measures_publishes_and_rank_zero_judges(session: Any) -> None:
    options = RunOptions.build(device_budget_s=1.0)
    report = device_probes.measure(session, options, WATCH, device=FakeDevice())
    assert report.serial == "1654922000001" and report.uuid == "GPU-0000-1111" and report.errors == {}
    rows, found = device_probes.lead(session, options, WATCH, hosts={0: "node7"})
    assert found == [] and [r.rank for r in rows] == [0]
    assert rows[0].figure("gemm_bf16").pct_of_peak == pytest.approx(798 / 989, rel=1e-3)
    outcomes = device_probes.outcomes(found)
    assert len(outcomes) == 9 and {o.status.value for o in outcomes} == {"ok"}


def test_a_device_that_never_finishes_could_not_run(session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_probes, "GRACE_S", 0.5)  # the deadline's margin, not its behaviour
    stuck = threading.Event()

    class HungDevice(FakeDevice):
        def burst(self, call: Any, iters: int) -> float:
            stuck.wait(60)  # a kernel that never completes
            return 0.0

    report = device_probes.measure(session, RunOptions.build(device_budget_s=0.1), WATCH, device=HungDevice())
    stuck.set()
    assert "did not finish within" in report.errors["every figure"] and session.abandoned
    _, found = device_probes.lead(session, RunOptions.build(device_budget_s=0.1), WATCH, hosts={0: "node7"})
    assert [(f.check_id, f.severity.value, f.ranks) for f in found] == [("DEV009", "could-not-run", [0])]


def test_ranks_sharing_one_gpu_elect_one_to_measure_it() -> None:
    board = Board(HashStore())
    assert device_probes.elect(board, 4, "node7", "GPU-A") == 4  # the first to ask measures
    assert device_probes.elect(board, 1, "node7", "GPU-A") == 4  # the other is told who does
    assert device_probes.elect(board, 1, "node8", "GPU-A") == 1  # another host's GPU is another GPU
    assert device_probes.elect(board, 2, "node7", "") == 2  # no UUID (a CPU): every rank measures its own


def test_the_rank_that_shares_a_gpu_measures_nothing_and_is_blamed_for_nothing(session: Any) -> None:
    session.board.agree(keys.GPU_SEAT.at("node7", "GPU-0000-1111"), "3")  # rank 3, bound to the same GPU, asked first
    device = FakeDevice(rates={**FakeDevice().rates, "gemm_bf16": 100.0})  # would be slow and below peak
    report = device_probes.measure(session, RunOptions.build(device_budget_s=1.0), WATCH, device=device)
    assert report.shared_with == 3 and report.measured == [] and device.bursts == {}
    assert report.skipped == {"every figure": "shares GPU GPU-0000-1111 with rank 3, which measures it for both"}
    rows, found = device_probes.lead(session, RunOptions.build(device_budget_s=1.0), WATCH, hosts={0: "node7"})
    assert rows[0].shared_with == 3 and found == []  # no DEV003/DEV006, no could-not-run
