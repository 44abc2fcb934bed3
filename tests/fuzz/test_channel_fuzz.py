"""Fuzzed values under every key family of the store: rank 0 (and a follower reading rank 0's
decisions) raises nothing, and a value that does not decode is a bad value naming its rank.

Each case writes one fuzzed value into a real c10d HashStore under one key family and runs the
code that reads that family (channel/board.py underneath). A foreign client or a corrupt rank
can write any bytes under any key; the guarantee is that the run goes on and reports it.
"""

from __future__ import annotations

import time
import typing
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
import torch.distributed as dist  # at import: its first import (seconds) is no example's deadline
from hypothesis import given
from hypothesis import strategies as st

from preflight.channel import keys
from preflight.channel.board import BadValue, Board, decode_value
from preflight.channel.keys import listed_ranks
from preflight.channel.liveness import read_dead
from preflight.lib.storage_options import StorageOptions
from preflight.model import IbCounters, JobReport, ReportMeta
from preflight.model import messages as m
from preflight.model import storage as sm
from preflight.model.codec import encode
from preflight.model.device_probe import DeviceReport
from preflight.model.nccl_account import NcclAccount
from preflight.model.placement_facts import ClockStamp
from preflight.model.reachability import ReachListener
from preflight.steps.storage import _gather
from preflight.steps.storage_judge import Judge
from tests.fuzz.strategies import FUZZ, FUZZ_SLOW, json_value

# Every message row of channel/keys.py's table, with one valid value each (the row gives the type).
FAMILIES: dict[str, Any] = {
    keys.RESULT.at(1): m.ProbeReport("h", [m.StepRecord("tp", "all_reduce", 64, 0, [0, 1], 0, [0.1])]),
    keys.POSITION.at(1): 3,
    keys.BOUND.at(1): m.BoundRecord("h", "nccl", m.BoundDevice(0, "H100", "00000000:18:00.0", "GPU-1")),
    keys.DEVICE.at(1): DeviceReport(1, "h", "cpu"),
    keys.NCCL_ACCOUNT.at(1): NcclAccount(nccl_version="2.21.5", network="IB", gdr=True, intra={"P2P/CUMEM": 2}),
    keys.SETUP.at(1): m.SetupStage("done", "h"),
    keys.NO_GPU.at(1): m.NoGpu("no GPU"),
    keys.DEAD.key: m.DeadRanks({2: "its heartbeat stopped"}),
    keys.left_key(1): m.RankLeft("received SIGTERM"),
    keys.AGAIN.key: m.RemeasureSteps([0, 2], 4),
    keys.CONFIRM.key: m.ConfirmPairs([(0, 1)], 4),
    keys.LOCALIZE.key: m.LocalizePlan([0, 1], True),
    keys.PAIR.at(1): m.PairTimes({0: [0.1, 0.2]}),
    keys.CONFIRM_PAIR.at(1): m.PairSamples([(0, 1, [1.0, 2.0])]),
    keys.ROUND.at(0): m.RoundPlan([0, 1], [[2, 3]]),
    keys.ROUND_TIMES.at(0, 1): m.RoundTimes([0.1], [0.2]),
    keys.REACH_LISTENER.at("h1"): ReachListener("h1", "10.0.0.1", "eth0", 4000, rank=1),
    keys.REACH_ROSTER.key: [ReachListener("h1", "10.0.0.1", "eth0", 4000, rank=1)],
    keys.REACH_RESULT.at("h1"): m.ReachResult("h1", "eth0", "10.0.0.1", [m.ReachProbe("h0")]),
    keys.XID_AFTER.at(1): [79],
    keys.NIC_AFTER.at("h1"): [IbCounters("mlx5_0", 1, {"symbol_error": 0})],
    keys.CLAIMANT.at(1, 1): m.Claimant("h1", 42),
    keys.OWNER.key: m.OwnerMark("env", 4, "h0", 42),
    keys.GO.key: m.GoDecision(True, "world complete", "ab12"),
    keys.VERDICT.key: m.Verdict(3, "failed", "ab12"),
    keys.REPORT.key: JobReport(ReportMeta("env", "", "env", 2, 1, "127.0.0.1", 29500)),
    keys.CLOCK_OPEN.key: ClockStamp(1.5e9),
    keys.clock_ping_key(1): ClockStamp(1.5e9),
    keys.clock_pong_key(1): ClockStamp(1.5e9),
    keys.STORAGE_PLAN.key: sm.StoragePlan(".preflight-storage-x", "x", 2**20),
    keys.STORAGE_VISIT.at(1): sm.StorageVisit(1, "h1", True, mount=sm.MountView("/c", "nfs4", "f:/c")),
    keys.STORAGE_ROUND.at(0): sm.StorageRound(0, [0, 1]),
    keys.STORAGE_WROTE.at(0, 1): sm.StorageWrote(1, "/c/r1.p0", 2**20, 0.1, "ab"),
    keys.STORAGE_READS.at(0): sm.StorageReads([[0, 1], [1, 0]]),
    keys.STORAGE_READ.at(0, 1): sm.StorageRead(1, 0, 2**20, 0.1, "ab"),
}


def test_every_message_row_of_the_table_is_fuzzed_here() -> None:
    """A row added to channel/keys.py's table without a case here fails: every family is fuzzed."""
    rows = {row for row in keys.TABLE if row.type not in (keys.Counter, keys.RankList, keys.Agreed, keys.Wire)}
    assert rows == {key.family for key in FAMILIES}  # type: ignore[attr-defined]
    for key, valid in FAMILIES.items():
        assert decode_value(encode(valid), key.family.type, key, 1) == valid  # type: ignore[attr-defined]


raw_value = st.one_of(st.binary(max_size=200), json_value.map(msgspec.json.encode),
                      st.sampled_from([b"", b"null", b"[]", b"{}", b'{"times": {"x": [1]}}', b'{"ranks": {"-1": 5}}',
                                       b"9" * 5000, b"[" * 5000, b'{"samples": [[0, 1]]}', b'{"pools": [[99999]]}']))


def mutated_message(family: str) -> st.SearchStrategy[bytes]:
    """The family's valid value with one part replaced by arbitrary JSON."""
    valid = FAMILIES[family]
    doc = msgspec.json.decode(encode(valid))
    if not isinstance(doc, dict) or not doc:
        return json_value.map(msgspec.json.encode)
    return st.tuples(st.sampled_from(sorted(doc)), json_value).map(
        lambda kv: msgspec.json.encode({**doc, kv[0]: kv[1]}))


@pytest.mark.parametrize("key", sorted(FAMILIES), ids=str)
@FUZZ
@given(data=st.data())
def test_every_family_decodes_or_is_a_bad_value_naming_its_rank(key: keys.Key[Any], data: st.DataObject) -> None:
    """Read through the board, as every reader does: the row's type, or a BadValue naming the rank."""
    into = key.family.type
    raw = data.draw(st.one_of(raw_value, mutated_message(key)))
    value = Board(store_with(key, raw)).read(key, 5)
    if isinstance(value, BadValue):
        assert value.rank == 5 and value.line().startswith(f"bad value from rank 5 under {str(key)!r}")
    else:
        assert value is not None and isinstance(value, typing.get_origin(into) or into)


def store_with(key: str, raw: bytes, **more: bytes) -> Any:
    store = dist.HashStore()
    store.set(key, raw)
    for k, v in more.items():
        store.set(k.replace("__", "/"), v)
    return store


@FUZZ_SLOW
@given(raw_value, st.sampled_from(["res/1", "pos/1", "dev/1"]))
def test_rank_0s_gather_of_probe_results_raises_nothing(raw: bytes, key: str) -> None:
    from preflight.probes.collect import diagnose_hang, gather, results

    good = encode(m.ProbeReport("h0", [], m.Status()))
    store = store_with(key, raw, res__0=good, **({} if key == "res/1" else {"res__1": good}))
    got = gather(Board(store), 2, 0.05)
    results(got, got.hosts())
    diagnose_hang(got, [("world", "all_reduce", 64)], {"world": [[0, 1]]}, 2)
    got.devices()
    assert not got.bad or set(got.bad) == {1}  # only rank 1's key was fuzzed: only rank 1 is named


@FUZZ_SLOW
@given(raw_value)
def test_rank_0s_read_of_setup_stages_raises_nothing(raw: bytes) -> None:
    from preflight.probes import setup

    stages, _ = setup.read_stages(Board(store_with("setup/1", raw)), 2)
    setup.blame(stages, 2)


def session_on(store: Any) -> SimpleNamespace:
    """What the localization readers use of a session: its board, a timeout, and kept()."""
    bad: dict[int, BadValue] = {}

    def kept(value: Any) -> Any:
        if isinstance(value, BadValue):
            bad.setdefault(value.rank, value)
            return None
        return value
    return SimpleNamespace(board=Board(store), timeout_s=0.05, kept=kept, bad_values=bad)


@FUZZ_SLOW
@given(raw_value)
def test_rank_0s_read_of_round_robin_times_raises_nothing(raw: bytes) -> None:
    from preflight.probes.localize import read_pair_times

    session = session_on(store_with("pair/1", raw, pair__0=encode(m.PairTimes({1: [0.1]}))))
    read_pair_times(session, [0, 1], time.monotonic() + 0.05)
    assert set(session.bad_values) <= {1}


@FUZZ_SLOW
@given(raw_value)
def test_rank_0s_read_of_confirming_samples_raises_nothing(raw: bytes) -> None:
    from preflight.probes.confirm import read_pair_samples

    session = session_on(store_with("cpair/1", raw))
    read_pair_samples(session, [(0, 1)], {}, time.monotonic() + 0.05)
    assert set(session.bad_values) <= {1}


@FUZZ_SLOW
@given(raw_value)
def test_rank_0s_read_of_group_testing_times_raises_nothing_but_a_probe_failure(raw: bytes) -> None:
    from preflight.probes.hosttest import _Rounds
    from preflight.probes.timing import ProbeFailed

    session = session_on(store_with("gt/0/t/1", raw, gt__0__t__0=encode(m.RoundTimes([0.1], []))))
    try:
        _Rounds(session, [0, 1])._figures(0, "reference", [0, 1], 64)
    except ProbeFailed as exc:  # what a group-testing round that cannot go on raises: reported, not a crash
        assert "bad value from rank 1" in str(exc) and set(session.bad_values) == {1}


@FUZZ_SLOW
@given(raw_value, st.sampled_from([keys.CLAIMED_KEY, keys.CONTESTED_KEY, keys.ARRIVALS_KEY, keys.ACKED_KEY]))
def test_rank_lists_and_the_dead_list_raise_nothing(raw: bytes, key: str) -> None:
    assert all(0 <= r < 8 for r in listed_ranks(store_with(key, raw), key, 8))
    assert isinstance(read_dead(store_with(keys.DEAD_KEY, raw)), dict)


@FUZZ_SLOW
@given(raw_value, st.sampled_from(["listener", "result"]))
def test_rank_0s_read_of_reachability_raises_nothing(raw: bytes, which: str) -> None:
    from preflight.steps.tcp_reach import fetch_typed

    key = (keys.REACH_LISTENER if which == "listener" else keys.REACH_RESULT).at("h1")
    found = fetch_typed(Board(store_with(key, raw)), [key], final=True)
    assert set(found) <= {key}


@FUZZ_SLOW
@given(raw_value, st.sampled_from([keys.XID_AFTER.at(1), keys.NIC_AFTER.at("h1")]))
def test_rank_0s_read_of_the_rechecks_raises_nothing(raw: bytes, key: keys.Key[Any]) -> None:
    from preflight.steps.recheck import _arrived

    assert set(_arrived(store_with(key, raw), [key], 0.01)) <= {key}


@FUZZ_SLOW
@given(st.one_of(raw_value, mutated_message(keys.VERDICT.key)), st.sampled_from([keys.GO.key, keys.VERDICT.key]),
       st.sampled_from([None, b"run-secret"]))
def test_a_followers_wait_for_a_decision_adopts_only_its_type_and_raises_nothing(
        raw: bytes, key: keys.Key[Any], secret: bytes | None) -> None:
    """Whatever a foreign client writes under go or verdict: adopted only as the key's type (and, with a
    secret, only proven), else refused and named; never an exception (runner._follow reads `.exit_code`)."""
    from preflight.channel.exchange import Exchange
    from preflight.model import World

    exchange = Exchange(World(launcher="env", rank=1, world_size=2, run_id="fuzz"), timeout_s=1.0)
    exchange.store, exchange.secret = store_with(key, raw), secret
    value = exchange._read_published(key)
    if value is None:
        assert set(exchange.refused) <= {str(key)}
    else:
        assert isinstance(value, key.family.type) and not secret


@FUZZ_SLOW
@given(st.one_of(raw_value, mutated_message(keys.OWNER.key)), st.sampled_from([None, "run-secret"]))
def test_a_joining_ranks_look_at_the_owner_mark_refuses_or_accepts_and_raises_nothing(
        raw: bytes, secret: str | None) -> None:
    """The owner mark (keys.OWNER): this run's (accepted) or ForeignStore naming the key."""
    import os

    from preflight.channel.store_join import ForeignStore, _verify_owner
    from preflight.model import World

    world = World(launcher="env", rank=1, world_size=4, run_id="env")
    before = os.environ.pop("PREFLIGHT_SECRET", None)
    if secret:
        os.environ["PREFLIGHT_SECRET"] = secret
    try:
        _verify_owner(store_with(keys.OWNER.key, raw), world, 0.01)
        accepted = True
    except ForeignStore as exc:
        accepted = False
        assert "not this run's" in str(exc) or "another run" in str(exc)
    finally:
        os.environ.pop("PREFLIGHT_SECRET", None)
        if before is not None:
            os.environ["PREFLIGHT_SECRET"] = before
    assert not accepted or not secret  # nothing a foreign client writes passes under a secret



@pytest.fixture(scope="module")
def torch_imported() -> None:
    """torch.distributed imported before the first example (seconds on a loaded machine: not the example's time)."""
    import torch.distributed  # noqa: F401


@FUZZ_SLOW
@given(raw_value, raw_value, raw_value)
def test_rank_0s_judgement_of_the_storage_family_raises_nothing(torch_imported: None, visit: bytes, wrote: bytes,
                                                                 read: bytes) -> None:
    """Fuzzed visits, writes and reads from rank 1 (rank 0's own are valid): a finding or nothing, never raised."""
    store = store_with(keys.STORAGE_VISIT.at(1), visit, storage__0__w__1=wrote, storage__0__r__1=read)
    board = Board(store)
    board.put(keys.STORAGE_VISIT.at(0), sm.StorageVisit(0, "h0", True, mount=sm.MountView("/c", "nfs4", "f:/c")))
    board.put(keys.STORAGE_WROTE.at(0, 0), sm.StorageWrote(0, "/c/r0.p0", 2**20, 0.1, "ab"))
    board.put(keys.STORAGE_READ.at(0, 0), sm.StorageRead(0, 1, 2**20, 0.1, "ab"))
    visits = _gather(board, [keys.STORAGE_VISIT.at(r) for r in (0, 1)], [0, 1], sm.StorageVisit, 0.05)
    judge = Judge(StorageOptions("/tmp", checkpoint_size=2**30), sm.StoragePlan("d", "x", 2**20), {0: "h0", 1: "h1"},
                  visits)
    wrote_got = _gather(board, [keys.STORAGE_WROTE.at(0, r) for r in (0, 1)], [0, 1], sm.StorageWrote, 0.05)
    judge.pairs(0, wrote_got)
    read_got = _gather(board, [keys.STORAGE_READ.at(0, r) for r in (0, 1)], [0, 1], sm.StorageRead, 0.05)
    judge.add_pass(0, wrote_got, read_got)
    assert all(f.check_id.startswith("STO") for f in judge.findings())
    judge.section(0.1)
