"""SIGTERM / SIGINT raised as Interrupted for the length of a run, for both front doors."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from preflight.lib.errors import Interrupted


@contextmanager
def interrupts_raised() -> Iterator[None]:
    """SIGTERM / SIGINT (a Slurm time limit, scancel, Ctrl-C) raise Interrupted, so the run
    finishes with what it knows and rank 0 still writes its report. The previous handlers
    come back on exit (preflight.check leaves a trainer's handlers as it found them)."""

    def raise_interrupted(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"received {signal.Signals(signum).name}")

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[signum] = signal.signal(signum, raise_interrupted)
        except ValueError:  # not the main thread (tests): keep the defaults
            pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
