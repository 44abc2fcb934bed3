"""lib/waiting.py: join_until ends with the thread, at its deadline, or when told to stop; a run's waits
back off to a ceiling sized to its world."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from preflight.channel.exchange import follower_poll_s
from preflight.lib import waiting
from preflight.lib.waiting import (
    LOOKS_PER_S,
    MAX_POLL_S,
    MIN_CEILING_S,
    ceiling_for,
    join_until,
    scaled_ceiling_s,
    wait_until,
)


def test_a_thread_that_ends_is_joined() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, daemon=True)
    thread.start()
    threading.Timer(0.05, release.set).start()
    assert join_until(thread, 60.0) is True
    assert not thread.is_alive()


def test_a_thread_still_running_at_the_deadline_is_left_running() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, daemon=True)
    thread.start()
    try:
        assert join_until(thread, 0.05, slice_s=0.01) is False
        assert thread.is_alive()
    finally:
        release.set()


def test_stop_if_ends_the_wait_before_the_deadline() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, daemon=True)
    thread.start()
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) >= 3

    try:
        assert join_until(thread, 600.0, stop_if=stop, slice_s=0.01) is False
        assert len(asked) == 3 and thread.is_alive()
    finally:
        release.set()


def test_followers_poll_ceiling_holds_the_store_load_whatever_n() -> None:
    # A small job looks often (20 ms); from 164 ranks on the ceiling grows with N, up to 2 s.
    assert follower_poll_s(4) == follower_poll_s(100) == 0.02
    assert follower_poll_s(2048) == 0.25 and follower_poll_s(131072) == 2.0
    for n in (200, 2048, 8192, 16384):  # followers x 2 store calls per look / ceiling: ~16k a second
        assert 2 * n / follower_poll_s(n) <= 16384 + 1e-6


def test_a_runs_waits_look_as_often_as_its_size_allows() -> None:
    # A 4-rank run's waits back off to 20 ms, not 0.2 s (a hand-off already due was seen up to 0.2 s
    # late); from 1,638 ranks on the ceiling is MAX_POLL_S, as before; outside a run, MAX_POLL_S.
    assert scaled_ceiling_s(4) == scaled_ceiling_s(100) == MIN_CEILING_S == 0.02
    assert scaled_ceiling_s(1638) < MAX_POLL_S == scaled_ceiling_s(1639) == scaled_ceiling_s(131072)
    for n in (200, 1024, 1638):  # every rank waiting at once, at its ceiling: ~8k looks a second at most
        assert n / scaled_ceiling_s(n) <= LOOKS_PER_S + 1e-6
    sleeps = _sleeps_of_a_wait_that_never_holds(looks=12)
    assert max(sleeps) == MAX_POLL_S  # no run: the old ceiling
    with ceiling_for(4) as ceiling:
        assert ceiling == 0.02
        sleeps = _sleeps_of_a_wait_that_never_holds(looks=12)
        assert sleeps[:3] == [0.005, 0.01, 0.02] and max(sleeps) == 0.02
        with ceiling_for(131072):  # nested: the inner run's, then the outer's again
            assert max(_sleeps_of_a_wait_that_never_holds(looks=12)) == MAX_POLL_S
        assert max(_sleeps_of_a_wait_that_never_holds(looks=12)) == 0.02
        # A wait that names its own ceiling keeps it
        assert max(_sleeps_of_a_wait_that_never_holds(looks=12, max_poll_s=0.1)) == 0.1
    assert max(_sleeps_of_a_wait_that_never_holds(looks=12)) == MAX_POLL_S


def test_two_runs_in_one_process_that_end_out_of_order_leave_no_ceiling_behind() -> None:
    # Two in-process runs on two threads: the first to start ends first. Restoring "what was before" on
    # exit left the second run's 20 ms ceiling in place for the rest of the process (seen in CI).
    first, second = ceiling_for(4), ceiling_for(8)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert max(_sleeps_of_a_wait_that_never_holds(looks=12)) == 0.02  # the second run goes on
    second.__exit__(None, None, None)
    assert max(_sleeps_of_a_wait_that_never_holds(looks=12)) == MAX_POLL_S


def _sleeps_of_a_wait_that_never_holds(looks: int, **kwargs: float) -> list[float]:
    """The pauses wait_until makes between `looks` looks at a condition that never holds (its module's
    time.sleep recorded, not slept: the deadline is far; no other thread's sleep is touched)."""
    sleeps: list[float] = []
    calls = iter(range(looks))

    def condition() -> bool:
        return False

    def stop() -> bool:
        return next(calls, None) is None

    real = waiting.time
    waiting.time = SimpleNamespace(sleep=sleeps.append, monotonic=time.monotonic)  # type: ignore[assignment]
    try:
        assert wait_until(condition, 600.0, stop_if=stop, **kwargs) is None
    finally:
        waiting.time = real
    return sleeps
