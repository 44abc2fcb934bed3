"""Hang diagnosis from the positions ranks left in the store (no communicator involved)."""

from __future__ import annotations

from preflight.channel.board import BadValue, Board
from preflight.model.codec import from_builtins
from preflight.model.messages import ProbeReport
from preflight.probes.collect import Gathered, diagnose_hang, results

STEPS = [("tp", "all_reduce", 100), ("tp", "all_to_all", 100), ("pp", "all_reduce", 100)]
GROUPS = {"tp": [[0, 1], [2, 3]], "pp": [[0, 2], [1, 3]]}


def _wire(state: str, step: int = -1, phase: str = "") -> dict:
    """A rank's `res/<rank>` as it crosses the store."""
    return {"host": "h", "records": [], "status": {"state": state, "step": step, "phase": phase, "reason": "",
                                                   "elapsed_s": 3.0}}


def _payload(state: str, step: int = -1, phase: str = "") -> ProbeReport:
    return from_builtins(_wire(state, step, phase), ProbeReport)


def test_no_hang_when_everyone_is_done() -> None:
    got = Gathered({r: _payload("done") for r in range(4)})
    assert diagnose_hang(got, STEPS, GROUPS, 4) is None


def test_rank_that_skipped_ahead_is_named_not_its_waiting_peer() -> None:
    got = Gathered({0: _payload("timeout", 2, "barrier"), 1: _payload("timeout", 2, "barrier"),
                    2: _payload("timeout", 1, "op"), 3: _payload("timeout", 2, "barrier")})
    hang = diagnose_hang(got, STEPS, GROUPS, 4)
    assert hang is not None and (hang.dim, hang.op, hang.group_index) == ("tp", "all_to_all", 1)
    assert list(hang.culprits) == [3] and hang.waiting == [2]


def test_rank_that_left_the_op_for_the_step_barrier_is_named() -> None:
    got = Gathered({0: _payload("timeout", 1, "barrier"), 1: _payload("timeout", 1, "op"),
                    2: _payload("timeout", 1, "barrier"), 3: _payload("timeout", 1, "barrier")})
    hang = diagnose_hang(got, STEPS, GROUPS, 4)
    assert hang is not None and hang.group_index == 0 and list(hang.culprits) == [0]


def test_silent_rank_is_named_by_its_position() -> None:
    got = Gathered({0: _payload("timeout", 0, "op"), 2: _payload("done"), 3: _payload("done")}, positions={1: 0})
    hang = diagnose_hang(got, STEPS, GROUPS, 4)
    assert hang is not None and list(hang.culprits) == [1]


def test_whole_group_named_when_nobody_is_elsewhere() -> None:
    got = Gathered({0: _payload("timeout", 0, "op"), 1: _payload("timeout", 0, "op"),
                    2: _payload("timeout", 1, "barrier"), 3: _payload("timeout", 1, "barrier")})
    hang = diagnose_hang(got, STEPS, GROUPS, 4)
    assert hang is not None and sorted(hang.culprits) == [0, 1]


def test_group_time_is_the_slowest_ranks_median() -> None:
    def rec(rank_times: list[float]) -> dict:
        return {"step": 0, "dim": "tp", "op": "all_reduce", "size_bytes": 1000, "group_index": 0, "ranks": [0, 1],
                "times_s": rank_times, "output_ok": True, "bad_sources": []}
    got = Gathered({0: from_builtins({"host": "a", "records": [rec([1.0, 2.0, 9.0])], "status": {}}, ProbeReport),
                    1: from_builtins({"host": "b", "records": [rec([3.0, 3.0, 3.0])], "status": {}}, ProbeReport)})
    (r,) = results(got, got.hosts())
    assert r.rank_times_s == {0: 2.0, 1: 3.0} and r.time_s == 3.0
    assert r.algbw_gbps == 1000 / 3.0 / 1e9 and r.busbw_gbps == r.algbw_gbps  # 2(n-1)/n = 1 for n=2
    assert r.hosts == ["a", "b"]


def test_a_rank_whose_step_raised_could_not_run_it_and_is_named_with_the_op() -> None:
    error = _payload("error", 1, "op")
    error.status.reason = "all_to_all: TypeError: all_to_all_single() got an unexpected keyword"
    got = Gathered({0: _payload("timeout", 1, "op"), 1: error, 2: _payload("done"), 3: _payload("done")})
    hang = diagnose_hang(got, STEPS, GROUPS, 4)
    assert hang is not None and hang.could_not_run and hang.failed
    assert list(hang.culprits) == [1] and "TypeError" in hang.culprits[1] and hang.op == "all_to_all"
    assert hang.reason.startswith("all_to_all: TypeError")


def test_a_rank_stuck_creating_communicators_is_named_like_a_hung_collective() -> None:
    steps = [("tp", "connect", 0), ("pp", "connect", 0), *STEPS]
    got = Gathered({0: _payload("timeout", 0, "connect"), 2: _payload("timeout", 1, "barrier"),
                    3: _payload("timeout", 1, "barrier")}, positions={1: 0})
    hang = diagnose_hang(got, steps, GROUPS, 4)
    assert hang is not None and (hang.dim, hang.op, hang.group_index, hang.phase) == ("tp", "connect", 0, "connect")
    assert list(hang.culprits) == [1] and hang.waiting == [0]
    # It sent nothing: blocked inside the creation (ncclCommInitRank holds its thread), so said so.
    assert "creating its communicators" in hang.culprits[1]


def test_a_silent_rank_at_a_measured_step_is_not_said_to_be_creating_communicators() -> None:
    got = Gathered({0: _payload("timeout", 0, "op"), 2: _payload("done"), 3: _payload("done")}, positions={1: 0})
    hang = diagnose_hang(got, STEPS, GROUPS, 4)
    assert hang is not None and "communicators" not in hang.culprits[1] and "no results" in hang.culprits[1]


def test_rank_zero_that_stopped_early_waits_a_grace_not_the_whole_timeout() -> None:
    import json
    import time

    import torch.distributed as dist

    from preflight.probes.collect import EARLY_GRACE_S, gather

    store = dist.HashStore()
    for rank in (0, 2):  # rank 1 never answers (hung outside the collective)
        store.set(f"res/{rank}", json.dumps(_wire("timeout", 0, "op")))
    store.set("pos/1", "0")
    started = time.monotonic()
    got = gather(Board(store), 3, 30.0, early=True)
    assert time.monotonic() - started < EARLY_GRACE_S + 2 and set(got.payloads) == {0, 2} and got.positions == {1: 0}


def test_every_ranks_backend_and_bound_gpu_reach_rank_zero() -> None:
    import json

    import torch.distributed as dist

    from preflight.probes.collect import gather

    store = dist.HashStore()
    for rank in range(2):
        store.set(f"res/{rank}", json.dumps(_wire("done")))
        device = {"index": 0, "name": "NVIDIA H100", "pci_bus_id": f"00000000:{0x18 + rank:02X}:00.0",
                  "uuid": f"GPU-{rank}"}
        store.set(f"dev/{rank}", json.dumps({"host": "g1", "backend": "nccl", "device": device}))
    got = gather(Board(store), 2, 5.0)
    assert [(d.rank, d.backend, d.index, d.uuid) for d in got.devices()] == [(0, "nccl", 0, "GPU-0"),
                                                                             (1, "nccl", 0, "GPU-1")]
    assert got.device_ids() == {0: "00000000:18:00.0", 1: "00000000:19:00.0"}


def test_a_value_that_is_no_probe_report_is_a_bad_value_naming_its_rank_not_an_exception() -> None:
    """A corrupt rank or a foreign client writes garbage under `res/1` and `pos/2`: rank 0 goes on."""
    import json

    import torch.distributed as dist

    from preflight.probes.collect import gather

    store = dist.HashStore()
    store.set("res/0", json.dumps(_wire("done")))
    store.set("res/1", '{"host": "h", "records": [{"step": "x"}], "status": 7}')
    store.set("res/2", json.dumps(_wire("done")))
    store.set("pos/2", "not a number")
    got = gather(Board(store), 3, 5.0)
    assert set(got.payloads) == {0, 2} and set(got.bad) == {1, 2}
    assert isinstance(got.bad[1], BadValue) and got.bad[1].line().startswith("bad value from rank 1 under 'res/1'")
    assert results(got, got.hosts()) == [] and diagnose_hang(got, STEPS, GROUPS, 3) is not None
