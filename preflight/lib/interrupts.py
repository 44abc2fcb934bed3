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
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

from preflight.lib.errors import Interrupted
from preflight.model import ExitCode

SIGNALS = (signal.SIGTERM, signal.SIGINT)
REPEAT_S = 1.0  # a signal this soon after the first is its forwarded copy (torch's agent, srun)
INCOMPLETE = int(ExitCode.INCOMPLETE)
# What even an exit at once does first (it skips the interpreter's exit handlers): each quick, waiting
# on no other process, its failure ignored. `preflight launch` removes its forkserver's socket folder here.
_AT_ONCE: list[Callable[[], object]] = []


def also_at_once(cleanup: Callable[[], object]) -> None:
    """Have `cleanup` run when this process leaves through exit_at_once (a signal, a second Ctrl-C, the
    command line's exit after the verdict), where the exit handlers that would have done it do not run."""
    _AT_ONCE.append(cleanup)


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

    with _handled_by(raise_interrupted):
        yield


@contextmanager
def interrupts_end_at_once(doing: str) -> Iterator[None]:
    """For the length of the block, SIGTERM / SIGINT end the process at once: one line, exit 4.

    For an import that must not be cut in half (torch's, seconds long; on a cold shared filesystem
    many): an exception raised inside a C extension's initialisation (numpy, imported by torch)
    leaves the module half-loaded and the rank's exit printed numpy's "cannot load module more than
    once" ImportError traceback, or an import guard swallowed it and the run went on to exit 0.
    Waiting for the import to finish instead would keep the user waiting seconds for nothing: no
    rank has anything to report yet. Outside the main thread handlers cannot be set: the block runs as is.
    """
    def leave(signum: int, frame: FrameType | None) -> None:
        leave_now(f"preflight: stopped ({signal.Signals(signum).name}) while {doing}; exit {INCOMPLETE}")

    with _handled_by(leave):
        yield


@contextmanager
def _handled_by(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """SIGTERM and SIGINT go to `handler` inside the block; the previous handlers come back after.
    Outside the main thread (tests) handlers cannot be set: the defaults stay."""
    previous = {}
    for signum in SIGNALS:
        try:
            previous[signum] = signal.signal(signum, handler)
        except ValueError:
            pass
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)


@contextmanager
def children_start_with_signals_held() -> Iterator[None]:
    """Every process started inside the block begins with SIGINT / SIGTERM blocked (the signal mask
    survives fork and exec); it unblocks them once its own handlers are in place
    (preflight/__main__.py, commands/forkserver_setup.py), and a signal sent meanwhile waits for that.

    Without this, a Ctrl-C in the first hundred milliseconds of a child interpreter (Python still
    importing `site`) is Python's own "Fatal Python error: init_import_site ... KeyboardInterrupt"
    traceback, which no code of ours can catch. CPython's resource tracker starts the same way. This
    process keeps receiving both signals through one thread that leaves them unblocked: a Python
    handler runs in the main thread whichever thread the kernel picked. Outside the main thread
    (tests) the block runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    done, ready = threading.Event(), threading.Event()

    def receive() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        ready.set()
        done.wait()

    receiver = threading.Thread(target=receive, name="preflight-signals", daemon=True)
    receiver.start()
    ready.wait()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        done.set()


def leave_now(line: str) -> NoReturn:
    """End this process at once with exit 4 after `line` on stderr: no traceback, and no interpreter
    shutdown, which can hang on a collective the signal interrupted or abort (std::terminate) on a
    C++ library whose import it interrupted."""
    try:
        print(line, file=sys.stderr, flush=True)
    finally:
        exit_at_once(INCOMPLETE)


def exit_at_once(code: int) -> NoReturn:
    """Leave the process with `code` now, output flushed, without interpreter shutdown (`also_at_once`'s
    cleanups run first)."""
    try:
        for cleanup in _AT_ONCE:
            try:
                cleanup()
            except Exception:  # a cleanup never keeps the process from leaving
                pass
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
