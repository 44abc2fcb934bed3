"""A call given up on is remembered while it runs, so the process can leave by os._exit (lib/deadline.py)."""

from __future__ import annotations

import threading
import time

from preflight.lib.deadline import abandoned_alive, call_with_deadline


def test_a_call_that_overran_is_abandoned_alive_until_it_returns() -> None:
    release = threading.Event()
    outcome = call_with_deadline(release.wait, 0.05)
    assert outcome.timed_out and abandoned_alive()  # still inside the call: leave by os._exit
    release.set()
    for _ in range(200):
        if not abandoned_alive():
            break
        time.sleep(0.01)
    assert not abandoned_alive()
    assert call_with_deadline(lambda: 7, 5.0).value == 7 and not abandoned_alive()
