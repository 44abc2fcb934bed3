"""Debounce: a state that is still changing is read again after a short grace before it counts.

A GPU's fabric registration still in progress, or an RDMA link still training (port INIT / ARMED,
physical state Polling or PortConfigurationTraining), is what every node shows for a while after
a reboot; judged on the first read, NVSentinel flagged 214 of 288 nodes during planned reboots
(NVSentinel#1701). `settle` reads again every POLL_S until the state settles or the grace has
passed (at least READS_PER_GRACE times, however short the grace); a state still transient then is
kept, with how long it was watched, and judged.

The grace is internal (GatherOptions.settle_grace_s, no option): SETTLE_GRACE_S by default,
bounded by the gatherer's own deadline, short in tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

SETTLE_GRACE_S = 3.0  # how long a transient state is watched before it is judged as it is
POLL_S = 0.25  # how often it is read again meanwhile
READS_PER_GRACE = 4  # a shorter grace is read again this often all the same


def grace_within(grace_s: float, deadline_s: float) -> float:
    """The grace a gatherer with `deadline_s` can afford: at most half of its deadline."""
    return max(0.0, min(grace_s, deadline_s * 0.5))


def settle(read: Callable[[], T], transient: Callable[[T], bool], first: T, grace_s: float,
           sleep: Callable[[float], None] = time.sleep) -> tuple[T, float]:
    """(the last value read, seconds watched): `read` again while `transient` holds, for up to `grace_s`.

    The time is counted in the sleeps asked for (not the clock), so a test's `sleep` that changes
    the state on the way is exact; `first` is the value already read.
    """
    value, waited = first, 0.0
    interval = min(POLL_S, grace_s / READS_PER_GRACE)
    while transient(value) and waited < grace_s - 1e-9:
        step = min(interval, grace_s - waited)
        sleep(step)
        waited += step
        value = read()
    return value, round(waited, 3)
