"""Is that rank alive (channel/liveness.py): rank 0's heartbeat keeps followers waiting while it
works, and only then; rank 0's one watch names the silent and the departed, once, for every use."""

from __future__ import annotations

import time
from datetime import timedelta

from torch.distributed import TCPStore

from preflight.channel import keys
from preflight.channel import liveness as lv
from preflight.channel.keys import beat_key
from preflight.channel.liveness import HEARTBEAT_KEY, STORE_LOST_GRACE_S, RankLiveness, read_dead, stage_budget_s
from preflight.model.messages import Verdict


class CountingStore:
    """The one store call the heartbeat makes: add."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def add(self, key: str, amount: int) -> int:
        self.values[key] = self.values.get(key, 0) + amount
        return self.values[key]


def test_a_beat_pushes_the_followers_deadline_and_silence_lets_it_run_out() -> None:
    store = CountingStore()
    store.add(HEARTBEAT_KEY, 5)  # beats before the wait began do not count
    liveness = lv._LeadDeadline(RankLiveness(2, 1, store), timeout_s=0.0, stall_s=0.3)
    assert liveness.time_left() <= 0
    store.add(HEARTBEAT_KEY, 1)
    assert liveness.time_left() > 0.2  # rank 0 beat: wait on
    time.sleep(0.35)
    assert liveness.time_left() <= 0  # no beat since: give up


def test_rank_zero_beats_while_its_stage_is_in_budget_only() -> None:
    store = CountingStore()
    beat = lv._Beat(store, HEARTBEAT_KEY, 0.02, budget_s=stage_budget_s(8))
    time.sleep(0.2)
    assert store.values[HEARTBEAT_KEY] >= 3
    beat.budget_s = 0.0  # the stage overran its budget: a hung rank 0 stops beating
    time.sleep(0.05)
    stalled = store.values[HEARTBEAT_KEY]
    time.sleep(0.1)
    assert store.values[HEARTBEAT_KEY] == stalled
    beat.stop()
    assert stage_budget_s(16384) > stage_budget_s(1024) >= 60


def test_exchange_wait_gives_up_on_time_and_sees_a_late_value() -> None:
    from preflight.channel.exchange import Exchange
    from preflight.model import World

    server = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10), wait_for_workers=False)
    world = World(launcher="env", rank=1, world_size=2, master_port=server.port, run_id="hb")
    exchange = Exchange(world, timeout_s=5.0)
    exchange.store = TCPStore("127.0.0.1", server.port, None, False, timedelta(seconds=10))
    started = time.monotonic()
    assert exchange.wait_for(keys.VERDICT.key, 0.3) is None and time.monotonic() - started < 1.5
    exchange.store.set(keys.VERDICT.key, '{"exit_code": 3}')
    assert exchange.wait_for(keys.VERDICT.key, 5.0) == Verdict(3)


def _server() -> TCPStore:
    return TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=10), wait_for_workers=False)


def test_rank_zero_names_a_rank_whose_beat_stopped_and_only_that_one() -> None:
    server = _server()
    beating = lv._Beat(server, beat_key(1), 0.05)
    watch = RankLiveness(3, 0, server, stall=0.5, poll_s=0.05)
    watch.watch([1, 2])  # rank 2's key is made: it reads as never beaten, a rank killed before its first beat
    watch.lead()
    assert wait_until_true(lambda: 2 in watch.dead(), 10.0)
    assert 1 not in watch.dead() and "heartbeat" in watch.dead()[2]
    assert set(read_dead(server)) == {2}  # published for every rank's waits
    beating.stop()
    assert wait_until_true(lambda: 1 in watch.dead(), 10.0)  # its beat stopped too: now dead as well
    watch.stop()


def test_a_rank_that_says_it_left_is_gone_at_once_and_the_hand_off_does_not_learn_anew() -> None:
    """The hand-off reads what the watch learned: a rank silent since the collect and a rank that
    said it left are not waited for, where a hand-off of its own would wait a whole stall for each."""
    from preflight.channel import roster

    server = _server()
    for rank in (1, 2):
        roster.claim(server, rank, f"node{rank}")
    lead = RankLiveness(3, 0, server, stall=60.0)
    started = time.monotonic()
    lead.look(now=started)
    follower = RankLiveness(3, 1)
    follower.joined(TCPStore("127.0.0.1", server.port, None, False, timedelta(seconds=10)))
    assert wait_until_true(lambda: server.add(beat_key(1), 0) > 1, 10.0) and follower.beating()
    assert set(lead.look(now=started + 60.0)) == {2}  # silent for a stall (a clock of the test's)
    follower.leave("received SIGTERM")
    assert not follower.beating()
    assert "received SIGTERM" in lead.look()[1]
    began = time.monotonic()
    assert lead.await_acknowledgements(cap_s=600) == [1, 2]
    assert time.monotonic() - began < 30  # "does not hang": a stall (60 s) or the cap (600 s) would


def wait_until_true(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_a_wait_that_starts_after_the_store_was_lost_gets_only_the_grace() -> None:
    # Seen with rank 0 killed during the probes: the followers' verdict wait began with the store
    # already gone and ran out the whole --timeout + --probe-timeout + margin instead of the grace.
    assert RankLiveness(2, 1).lead_deadline(600).time_left() <= STORE_LOST_GRACE_S


def test_a_rank_the_probes_named_hung_beats_on_but_the_hand_off_does_not_wait_for_it() -> None:
    """A rank stuck for good inside a collective beats on from its daemon thread: alive, never dead,
    but it will never read the verdict. Once the probes name it hung, rank 0's hand-off waits only for
    the others (here a cap of 600 s: waiting for the hung rank would run into the test's timeout)."""
    from preflight.channel import roster

    server = _server()
    for rank in (1, 2):
        roster.claim(server, rank, f"node{rank}")
    lead = RankLiveness(3, 0, server, stall=60.0)
    stuck = lv._Beat(server, beat_key(2), 0.05)  # rank 2's beat thread, its main thread stuck
    try:
        lead.look()
        lead.hung({2: "sent no probe results by the deadline"})
        assert lead.dead() == {} and read_dead(server) == {}  # hung is not dead: nobody calls it killed
        RankLiveness(3, 1, server).acknowledge()  # rank 1 read the verdict
        began = time.monotonic()
        assert lead.await_acknowledgements(cap_s=600) == [2]  # the one that never read it
        assert time.monotonic() - began < 30  # "does not hang": the cap (600 s) would
    finally:
        stuck.stop()


def test_a_lost_store_gives_one_grace_in_all_not_one_per_wait() -> None:
    # Before, each wait (the go, then the verdict) took a grace of its own after rank 0 was gone:
    # 20 s for an 8 s --timeout (issue 47). The grace counts from the loss, once.
    follower = RankLiveness(2, 1, CountingStore(), lost_grace_s=0.3)
    assert follower.lead_deadline(600).time_left() > 500
    follower.lead_lost(ConnectionResetError("Connection reset by peer"))
    assert 0 < follower.lead_deadline(600).time_left() <= 0.3
    time.sleep(0.35)
    assert follower.lead_deadline(600).time_left() <= 0  # a later wait gets no grace of its own
    assert "rank 0 is gone" in follower.abort_reason() and "reset by peer" in follower.abort_reason()


def test_a_rank_that_never_had_the_store_gets_one_grace_in_all() -> None:
    follower = RankLiveness(2, 1, lost_grace_s=0.3)  # the store never formed: --out-dir only
    assert 0 < follower.lead_deadline(600).time_left() <= 0.3
    time.sleep(0.35)
    assert follower.lead_deadline(600).time_left() <= 0  # the verdict's wait after the go's: no new grace
