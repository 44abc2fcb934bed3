"""SIGTERM / SIGINT raised as Interrupted for the length of a run, for both front doors.

The first signal asks the run to end with what it knows: rank 0 still writes its report, marked
incomplete, and every rank exits 4. A second one, on the command line, ends the process at once
(exit 4, no report beyond what is written): a user pressing Ctrl-C again does not want to wait.
A launcher forwards the signal it received to its workers, which got the terminal's copy too: a
repeat within REPEAT_S of the first is that same request, not a second one.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

from preflight.lib.errors import Interrupted
from preflight.model import ExitCode

SIGNALS = (signal.SIGTERM, signal.SIGINT)
REPEAT_S = 1.0  # a signal this soon after the first is its forwarded copy (torch's agent, srun)
INCOMPLETE = int(ExitCode.INCOMPLETE)


@contextmanager
def interrupts_raised(second_exits: bool = False) -> Iterator[None]:
    """SIGTERM / SIGINT (a Slurm time limit, scancel, Ctrl-C) raise Interrupted, so the run
    finishes with what it knows and rank 0 still writes its report. With `second_exits` (the
    command line), a second signal later than REPEAT_S after the first leaves at once with exit 4.
    The previous handlers come back on exit (preflight.check leaves a trainer's handlers as it
    found them)."""
    first: list[float] = []

    def raise_interrupted(signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if first:
            if now - first[0] < REPEAT_S:
                return  # the same request, forwarded: the first is being handled
            if second_exits:
                leave_now(f"preflight: received {signal.Signals(signum).name} again: stopping now; exit {INCOMPLETE}")
        first.append(now)
        raise Interrupted(f"received {signal.Signals(signum).name}")

    previous = {}
    for signum in SIGNALS:
        try:
            previous[signum] = signal.signal(signum, raise_interrupted)
        except ValueError:  # not the main thread (tests): keep the defaults
            pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGTERM / SIGINT held until the block ends, then handed to the handler in force (Interrupted).

    For an import that must not be cut in half: an exception raised inside a C extension's
    initialisation (numpy, imported by torch) leaves the module half-loaded, and the rank's exit
    prints numpy's "cannot load module more than once" ImportError traceback instead of ending
    cleanly. A later signal (not the forwarded copy of the first) leaves at once, as a second
    Ctrl-C does. Outside the main thread signal handlers cannot be set: the block runs as is.
    """
    held: list[tuple[int, float]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if held and now - held[0][1] >= REPEAT_S:
            leave_now(f"preflight: received {signal.Signals(signum).name} again: stopping now; exit {INCOMPLETE}")
        if not held:
            held.append((signum, now))

    previous = {}
    for signum in SIGNALS:
        try:
            previous[signum] = signal.signal(signum, hold)
        except ValueError:  # not the main thread
            pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if held:
        _deliver(held[0][0], previous.get(held[0][0]))


def _deliver(signum: int, handler: object) -> None:
    """Hand a held signal to `handler` as the kernel would have: call it, or the default action."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)


def leave_now(line: str) -> NoReturn:
    """End this process at once with exit 4 after `line` on stderr: no traceback, and no interpreter
    shutdown, which can hang on a collective the signal interrupted or abort (std::terminate) on a
    C++ library whose import it interrupted."""
    try:
        print(line, file=sys.stderr, flush=True)
    finally:
        exit_at_once(INCOMPLETE)


def exit_at_once(code: int) -> NoReturn:
    """Leave the process with `code` now, output flushed, without interpreter shutdown."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def ignore_interrupts() -> None:
    """The verdict is known: a signal from now on must not turn the exit code into -15 or a
    KeyboardInterrupt traceback while the interpreter shuts down (torchrun's agent stops its
    workers once one exited on a failing verdict)."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
