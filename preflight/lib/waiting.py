"""One way to wait: poll a condition with backoff until it holds or a deadline passes.

Every wait in preflight is for something another process does (a rank publishing, rank 0
deciding, a listener opening), and every wait has a deadline. The interval starts short, so
a quick answer is seen quickly, and doubles up to a ceiling, so thousands of ranks waiting on
one c10d store do not hammer it. The ceiling is the run's (`ceiling_for`): a few ranks polling
one store can afford to look every 20 ms, thousands cannot (a flat 0.2 s made a 4-rank
`preflight.check` wait up to 0.2 s after each hand-off it was already due: the reachability
roster, rank 0's collect, the probes' decisions).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

FIRST_POLL_S = 0.005
MAX_POLL_S = 0.2
MIN_CEILING_S = 0.02  # the smallest ceiling: a small job sees a peer's value within ~20 ms
LOOKS_PER_S = 8192  # every rank of a run polling at its ceiling: at most this many looks a second in all
# The ceilings of the runs in progress (ceiling_for), last entered last; MAX_POLL_S outside every run. A
# list, not a saved-and-restored value: two runs in one process (threads) may end in either order, and
# restoring what the other had set would leave its ceiling behind for good.
_run_ceilings: list[list[float]] = []
_ceilings_lock = threading.Lock()


def scaled_ceiling_s(world_size: int) -> float:
    """The longest pause between two looks for a run of `world_size` ranks: N / 8192 s, between
    20 ms and MAX_POLL_S. Below 1,638 ranks every rank of the run waiting at once makes at most
    ~8,192 looks a second in all; from 1,638 ranks on it is MAX_POLL_S, as it always was."""
    return min(MAX_POLL_S, max(MIN_CEILING_S, world_size / LOOKS_PER_S))


@contextmanager
def ceiling_for(world_size: int) -> Iterator[float]:
    """Within the block, waits that name no ceiling of their own use `scaled_ceiling_s(world_size)`
    (the run's steps, on every thread of it); the previous ceiling is back after it."""
    entry = [scaled_ceiling_s(world_size)]  # its own object: removed by identity, whichever ends first
    with _ceilings_lock:
        _run_ceilings.append(entry)
    try:
        yield entry[0]
    finally:
        with _ceilings_lock:
            _run_ceilings[:] = [other for other in _run_ceilings if other is not entry]


def run_ceiling_s() -> float:
    """The ceiling of the run entered last and still in progress; MAX_POLL_S outside every run."""
    ceilings = _run_ceilings[-1:]
    return ceilings[0][0] if ceilings else MAX_POLL_S


def wait_until(condition: Callable[[], T], timeout_s: float | Callable[[], float], *,
               stop_if: Callable[[], bool] | None = None, first_poll_s: float = FIRST_POLL_S,
               max_poll_s: float | None = None) -> T | None:
    """Call `condition` until it returns a truthy value; that value, or None once `timeout_s` passed.

    The condition runs at least once, and once more at the deadline, so a value that arrived
    during the last sleep is not missed. It may do work on each call (fetch what arrived) and
    decide itself when it is done. `stop_if` ends the wait early (None) when nothing more can
    arrive, e.g. the channel is gone. `timeout_s` may be a function giving the seconds left, for
    a deadline that moves (a heartbeat that extends it). `max_poll_s`: the ceiling of the
    backoff; None, the run's (`ceiling_for`).
    """
    if callable(timeout_s):
        time_left = timeout_s
    else:
        deadline = time.monotonic() + max(0.0, timeout_s)

        def time_left() -> float:
            return deadline - time.monotonic()

    ceiling = run_ceiling_s() if max_poll_s is None else max_poll_s
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
        poll = min(poll * 2, ceiling)


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
