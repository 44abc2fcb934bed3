"""Fuzzed values under every key family of the store: rank 0 (and a follower reading rank 0's
decisions) raises nothing, and a value that does not decode is a bad value naming its rank.

Each case writes one fuzzed value into a real c10d HashStore under one key family and runs the
code that reads that family (channel/board.py underneath). A foreign client or a corrupt rank
can write any bytes under any key; the guarantee is that the run goes on and reports it.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from preflight.channel import keys
from preflight.channel.board import BadValue, Board, decode_value
from preflight.channel.keys import listed_ranks
from preflight.channel.liveness import read_dead
from preflight.lib.storage_options import StorageOptions
from preflight.model import messages as m
from preflight.model import storage as sm
from preflight.model.codec import encode
from preflight.model.reachability import ReachListener
from preflight.steps.storage import _gather
from preflight.steps.storage_judge import Judge
from tests.fuzz.strategies import FUZZ, FUZZ_SLOW, json_value

# Every message family and its type (model/messages.py), with one valid value each.
FAMILIES: dict[str, tuple[Any, Any]] = {
    "res/1": (m.ProbeReport, m.ProbeReport("h", [m.StepRecord("tp", "all_reduce", 64, 0, [0, 1], 0, [0.1])])),
    "pos/1": (int, 3),
    "dev/1": (m.BoundRecord, m.BoundRecord("h", "nccl", m.BoundDevice(0, "H100", "00000000:18:00.0", "GPU-1"))),
    "setup/1": (m.SetupStage, m.SetupStage("done", "h")),
    "no_gpu/1": (m.NoGpu, m.NoGpu("no GPU")),
    "dead": (m.DeadRanks, m.DeadRanks({2: "its heartbeat stopped"})),
    "again": (m.RemeasureSteps, m.RemeasureSteps([0, 2])),
    "confirm": (m.ConfirmPairs, m.ConfirmPairs([(0, 1)])),
    "localize": (m.LocalizePlan, m.LocalizePlan([0, 1], True)),
    "pair/1": (m.PairTimes, m.PairTimes({0: [0.1, 0.2]})),
    "cpair/1": (m.PairSamples, m.PairSamples([(0, 1, [1.0, 2.0])])),
    "gt/0": (m.RoundPlan, m.RoundPlan([0, 1], [[2, 3]])),
    "gt/0/t/1": (m.RoundTimes, m.RoundTimes([0.1], [0.2])),
    "reach/listener/h1": (ReachListener, ReachListener("h1", "10.0.0.1", "eth0", 4000, rank=1)),
    "reach/result/h1": (m.ReachResult, m.ReachResult("h1", "eth0", "10.0.0.1", [m.ReachProbe("h0")])),
    "storage/plan": (sm.StoragePlan, sm.StoragePlan(".preflight-storage-x", "x", 2**20)),
    "storage/visit/1": (sm.StorageVisit, sm.StorageVisit(1, "h1", True, mount=sm.MountView("/c", "nfs4", "f:/c"))),
    "storage/round/0": (sm.StorageRound, sm.StorageRound(0, [0, 1])),
    "storage/0/w/1": (sm.StorageWrote, sm.StorageWrote(1, "/c/r1.p0", 2**20, 0.1, "ab")),
    "storage/0/read": (sm.StorageReads, sm.StorageReads([[0, 1], [1, 0]])),
    "storage/0/r/1": (sm.StorageRead, sm.StorageRead(1, 0, 2**20, 0.1, "ab")),
}

raw_value = st.one_of(st.binary(max_size=200), json_value.map(msgspec.json.encode),
                      st.sampled_from([b"", b"null", b"[]", b"{}", b'{"times": {"x": [1]}}', b'{"ranks": {"-1": 5}}',
                                       b"9" * 5000, b"[" * 5000, b'{"samples": [[0, 1]]}', b'{"pools": [[99999]]}']))


def mutated_message(family: str) -> st.SearchStrategy[bytes]:
    """The family's valid value with one part replaced by arbitrary JSON."""
    _, valid = FAMILIES[family]
    doc = msgspec.json.decode(encode(valid))
    if not isinstance(doc, dict) or not doc:
        return json_value.map(msgspec.json.encode)
    return st.tuples(st.sampled_from(sorted(doc)), json_value).map(
        lambda kv: msgspec.json.encode({**doc, kv[0]: kv[1]}))


@pytest.mark.parametrize("family", sorted(FAMILIES))
@FUZZ
@given(data=st.data())
def test_every_family_decodes_or_is_a_bad_value_naming_its_rank(family: str, data: st.DataObject) -> None:
    into, _ = FAMILIES[family]
    raw = data.draw(st.one_of(raw_value, mutated_message(family)))
    value = decode_value(raw, into, family, 5)
    assert isinstance(value, into) or (isinstance(value, BadValue) and value.rank == 5
                                       and value.line().startswith(f"bad value from rank 5 under {family!r}"))


def store_with(key: str, raw: bytes, **more: bytes) -> Any:
    import torch.distributed as dist

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

    into = ReachListener if which == "listener" else m.ReachResult
    found = fetch_typed(Board(store_with(f"reach/{which}/h1", raw)), [f"reach/{which}/h1"], into, final=True)
    assert set(found) <= {f"reach/{which}/h1"}


@FUZZ_SLOW
@given(raw_value, st.sampled_from(["xid_after/1", "nic_after/h1"]))
def test_rank_0s_read_of_the_rechecks_raises_nothing(raw: bytes, key: str) -> None:
    from preflight.model import IbCounters
    from preflight.steps.recheck import _arrived

    into = list[int] if key.startswith("xid") else list[IbCounters]
    assert set(_arrived(store_with(key, raw), [key], into, 0.01)) <= {key}


@pytest.fixture(scope="module")
def torch_imported() -> None:
    """torch.distributed imported before the first example (seconds on a loaded machine: not the example's time)."""
    import torch.distributed  # noqa: F401


@FUZZ_SLOW
@given(raw_value, raw_value, raw_value)
def test_rank_0s_judgement_of_the_storage_family_raises_nothing(torch_imported: None, visit: bytes, wrote: bytes,
                                                                 read: bytes) -> None:
    """Fuzzed visits, writes and reads from rank 1 (rank 0's own are valid): a finding or nothing, never raised."""
    store = store_with(keys.storage_visit_key(1), visit, storage__0__w__1=wrote, storage__0__r__1=read)
    board = Board(store)
    board.put(keys.storage_visit_key(0), sm.StorageVisit(0, "h0", True, mount=sm.MountView("/c", "nfs4", "f:/c")))
    board.put(keys.storage_wrote_key(0, 0), sm.StorageWrote(0, "/c/r0.p0", 2**20, 0.1, "ab"))
    board.put(keys.storage_read_key(0, 0), sm.StorageRead(0, 1, 2**20, 0.1, "ab"))
    visits = _gather(board, [keys.storage_visit_key(r) for r in (0, 1)], [0, 1], sm.StorageVisit, 0.05)
    judge = Judge(StorageOptions("/tmp", checkpoint_size=2**30), sm.StoragePlan("d", "x", 2**20), {0: "h0", 1: "h1"},
                  visits)
    wrote_got = _gather(board, [keys.storage_wrote_key(0, r) for r in (0, 1)], [0, 1], sm.StorageWrote, 0.05)
    judge.pairs(0, wrote_got)
    read_got = _gather(board, [keys.storage_read_key(0, r) for r in (0, 1)], [0, 1], sm.StorageRead, 0.05)
    judge.add_pass(0, wrote_got, read_got)
    assert all(f.check_id.startswith("STO") for f in judge.findings())
    judge.section(0.1)
