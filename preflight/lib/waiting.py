"""One way to wait: poll a condition with backoff until it holds or a deadline passes.

Every wait in preflight is for something another process does (a rank publishing, rank 0
deciding, a listener opening), and every wait has a deadline. The interval starts short, so
a quick answer is seen quickly, and doubles up to a ceiling, so thousands of ranks waiting on
one c10d store do not hammer it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

FIRST_POLL_S = 0.005
MAX_POLL_S = 0.2


def wait_until(condition: Callable[[], T], timeout_s: float | Callable[[], float], *,
               stop_if: Callable[[], bool] | None = None, first_poll_s: float = FIRST_POLL_S,
               max_poll_s: float = MAX_POLL_S) -> T | None:
    """Call `condition` until it returns a truthy value; that value, or None once `timeout_s` passed.

    The condition runs at least once, and once more at the deadline, so a value that arrived
    during the last sleep is not missed. It may do work on each call (fetch what arrived) and
    decide itself when it is done. `stop_if` ends the wait early (None) when nothing more can
    arrive, e.g. the channel is gone. `timeout_s` may be a function giving the seconds left, for
    a deadline that moves (a heartbeat that extends it).
    """
    if callable(timeout_s):
        time_left = timeout_s
    else:
        deadline = time.monotonic() + max(0.0, timeout_s)

        def time_left() -> float:
            return deadline - time.monotonic()

    poll = first_poll_s
    while True:
        value = condition()
        if value:
            return value
        left = time_left()
        if stop_if is not None and stop_if():
            return None
        if left <= 0:
            return None
        time.sleep(min(poll, left))
        poll = min(poll * 2, max_poll_s)


def join_until(thread: threading.Thread, timeout_s: float, *, stop_if: Callable[[], bool] | None = None,
               slice_s: float = 0.1) -> bool:
    """Wait for `thread` to end, at most timeout_s; whether it ended.

    A join, not a poll: the wait ends the moment the thread does (a backed-off poll overshot
    by up to its interval, ~0.1 s per set-up stage of the probes). `stop_if` is asked every
    slice_s and ends the wait early when it holds (a peer known dead).
    """
    deadline = time.monotonic() + max(0.0, timeout_s)
    while thread.is_alive():
        left = deadline - time.monotonic()
        if left <= 0 or (stop_if is not None and stop_if()):
            break
        thread.join(min(slice_s, left))
    return not thread.is_alive()
