"""The first SIGINT / SIGTERM raises Interrupted; its copy a launcher forwards right after is not a
second one (lib/interrupts.py). A second one later ends the process: tests/commands/test_interrupts.py."""

from __future__ import annotations

import os
import signal
import time

import pytest

from preflight.lib import interrupts
from preflight.lib.errors import Interrupted


def _signal_self(sig: signal.Signals) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs in the main thread at the next bytecode


def test_the_first_signal_raises_and_its_forwarded_copy_is_the_same_request() -> None:
    before = signal.getsignal(signal.SIGINT)  # whatever the test runner set (an xdist worker ignores SIGINT)
    with interrupts.interrupts_raised():
        with pytest.raises(Interrupted, match="received SIGTERM"):
            _signal_self(signal.SIGTERM)
        _signal_self(signal.SIGINT)  # within REPEAT_S: torch's agent forwarding the terminal's Ctrl-C
    assert signal.getsignal(signal.SIGINT) is before  # the previous handlers are back


def test_a_signal_after_the_repeat_window_is_raised_again_without_second_exits(monkeypatch) -> None:
    monkeypatch.setattr(interrupts, "REPEAT_S", 0.0)
    with interrupts.interrupts_raised():
        for sig in (signal.SIGINT, signal.SIGTERM):
            with pytest.raises(Interrupted, match=f"received {sig.name}"):
                _signal_self(sig)


def test_a_signal_during_a_deferred_block_is_raised_once_the_block_is_done() -> None:
    """torch's import runs deferred: the block finishes (numpy whole), then the run sees Interrupted."""
    finished = []
    with interrupts.interrupts_raised():
        with pytest.raises(Interrupted, match="received SIGTERM"):
            with interrupts.interrupts_deferred():
                _signal_self(signal.SIGTERM)
                _signal_self(signal.SIGTERM)  # its forwarded copy: still the one request
                finished.append(True)
        assert finished == [True]
        with interrupts.interrupts_deferred():  # nothing held: nothing raised
            finished.append(True)
    assert finished == [True, True]


def test_a_later_signal_during_a_deferred_block_leaves_at_once(monkeypatch) -> None:
    """A second Ctrl-C while the import is still running ends the process (exit 4), as it does elsewhere."""
    monkeypatch.setattr(interrupts, "REPEAT_S", 0.0)
    left = []
    monkeypatch.setattr(interrupts, "leave_now", lambda line: left.append(line))
    with interrupts.interrupts_raised():
        with pytest.raises(Interrupted):
            with interrupts.interrupts_deferred():
                _signal_self(signal.SIGINT)
                _signal_self(signal.SIGINT)
    assert left == ["preflight: received SIGINT again: stopping now; exit 4"]
