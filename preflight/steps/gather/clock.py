"""Whether this host keeps time: a time daemon running, and the kernel's synchronised flag.

The offset itself is measured later, once the store is up (preflight/channel/clock.py); this
gatherer records what the host says about its own clock, where that can be read.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from preflight.model import RankFacts

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions

DAEMONS = ("chronyd", "ntpd", "systemd-timesyncd", "ntpsec", "openntpd", "timesyncd", "ptp4l", "phc2sys")
TIME_ERROR = 5  # adjtimex's return when the kernel's clock is not synchronised (STA_UNSYNC)


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.placement.clock's daemon, synchronised flag and this run's threshold."""
    clock = facts.placement.clock
    clock.threshold_s = options.clock_skew_s
    clock.daemon = running_daemon()
    clock.synchronised = kernel_synchronised()


def running_daemon() -> str:
    """The first time daemon found among this host's processes ("" none seen)."""
    import psutil

    for proc in psutil.process_iter(["name"]):
        name = proc.info.get("name") or ""
        if name in DAEMONS:
            return name
    return ""


def kernel_synchronised() -> bool | None:
    """adjtimex(2) with modes 0 (a read): False when the kernel says TIME_ERROR, None when unreadable."""
    try:
        # The process's own symbols, libc's among them: find_library("c") ran `ldconfig -p` in a
        # subprocess, a fork of a rank with torch loaded, on every rank of every run.
        libc = ctypes.CDLL(None, use_errno=True)
        buffer = ctypes.create_string_buffer(512)  # struct timex (208 bytes on x86_64), modes = 0: read only
        state = libc.adjtimex(buffer)
    except (OSError, AttributeError):
        return None
    return None if state < 0 else state != TIME_ERROR
