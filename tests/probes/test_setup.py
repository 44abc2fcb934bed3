"""Communicator setup under its own deadline (preflight/probes/setup.py).

NCCL's ncclCommInitRank has no timeout of its own; on CPU a helper-thread body that never
returns stands in for it (the real thing is in tests/probes/test_probes_gpu.py). The blame
rule runs on stages read back from a real c10d store, and one real two-rank gloo run has a
rank that never reaches setup.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from preflight.channel.board import Board
from preflight.channel.liveness import RankLiveness
from preflight.probes import liveness, setup
from tests.helpers.ranks import Placement, free_port, plant_env, read_json, start_rank, wait_for_ranks


def _alone() -> RankLiveness:
    """A one-rank world's liveness: no peer can die, so only the deadline ends a bounded call."""
    return RankLiveness(1, 0)


def test_a_body_that_returns_or_raises_is_handed_back() -> None:
    assert liveness.bounded(lambda: 42, 30, _alone()) == 42
    with pytest.raises(KeyError):
        liveness.bounded(lambda: {}["missing"], 30, _alone())


def test_a_body_that_never_returns_ends_in_setup_timeout() -> None:
    never = threading.Event()
    with pytest.raises(setup.SetupTimeout, match=r"did not finish within 0\.5s"):
        liveness.bounded(never.wait, 0.5, _alone())
    never.set()  # let the helper thread go


def test_the_ranks_furthest_behind_are_blamed_and_the_rest_were_waiting() -> None:
    stages = {0: "DeviceMesh", 1: "done", 3: "DeviceMesh"}
    found = setup.blame(stages, 4)
    assert found.culprits == {2: "never reached communicator setup"} and found.waiting == [0, 1, 3]
    found = setup.blame({0: "DeviceMesh", 1: "process group", 2: "DeviceMesh"}, 3)
    assert found.culprits == {1: "still in setup stage 'process group'"} and found.waiting == [0, 2]


def test_every_rank_inside_one_stage_singles_nobody_out() -> None:
    found = setup.blame({r: "process group" for r in range(4)}, 4)
    assert found.culprits == {} and found.waiting == [0, 1, 2, 3] and found.common_stage == "process group"
    assert setup.blame({r: "done" for r in range(4)}, 4) == setup.SetupBlame({}, [])


def test_stages_and_hosts_are_read_back_from_a_real_store() -> None:
    board = Board(dist.TCPStore("127.0.0.1", free_port(), 1, True, timedelta(seconds=10)))
    setup.marker(board, 0, "node-a")("DeviceMesh")
    setup.marker(board, 2, "node-b")("done")
    stages, hosts = setup.read_stages(board, 3)
    assert stages == {0: "DeviceMesh", 2: "done"} and hosts == {0: "node-a", 2: "node-b"}


# Rank 1 is held up before communicator setup (as a GPU hanging in context creation would hold it).
HELD_UP_BEFORE_SETUP = """
import time
import preflight.probes.plan as plan
real = plan.build_plan
def build_plan(*args, **kwargs):
    time.sleep({seconds})
    return real(*args, **kwargs)
plan.build_plan = build_plan
"""
EXIT_BOUND_S = 60  # "does not hang": the 2 s probe deadline + 5 s process-group timeout, with headroom


def test_a_rank_that_never_reaches_setup_is_named_and_rank_0_exits_3(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["run", "--ops", "all_reduce", "--sizes", "64KiB", "--probe-timeout", "2", "--json", str(out)]
    port, started = free_port(), time.monotonic()
    held = Placement(env=plant_env(tmp_path, {1: HELD_UP_BEFORE_SETUP.format(seconds=12)}))
    procs = {rank: start_rank(rank, 2, args, placement=held if rank == 1 else Placement(), port=port)
             for rank in range(2)}
    try:
        runs = wait_for_ranks({0: procs[0]}, started, EXIT_BOUND_S)  # rank 1's own ending is not the point
    finally:
        procs[1].kill()
        procs[1].communicate()
    report = read_json(out)
    (hang,) = [f for f in report["findings"] if f["check_id"] == "BW002"]
    assert hang["ranks"] == [1] and hang["data"]["culprits"] == {"1": "never reached communicator setup"}, hang
    assert "communicator setup" in hang["message"] and hang["data"]["waiting"] == [0]
    assert runs[0].returncode == 3 and "killed after timeout" not in runs[0].stderr, runs[0].stderr[-1500:]
    # Rank 1 beats on while held up: rank 0 does not keep the job waiting for it to read the verdict.
    assert "rank 1 did not read the verdict (hung: never reached communicator setup)" in runs[0].stderr, \
        runs[0].stderr[-1500:]
