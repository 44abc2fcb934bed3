"""lib/waiting.py: join_until ends with the thread, at its deadline, or when told to stop."""

from __future__ import annotations

import threading

from preflight.channel.exchange import follower_poll_s
from preflight.lib.waiting import join_until


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
