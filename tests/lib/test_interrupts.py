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


def test_a_signal_inside_an_import_block_ends_the_process_at_once_with_one_line(monkeypatch) -> None:
    """torch's import: no Interrupted raised into it (numpy half-loaded), the process leaves with exit 4."""
    left: list[str] = []

    def leave_now(line: str) -> None:
        left.append(line)
        raise SystemExit(4)  # stands for os._exit: the block must not go on

    monkeypatch.setattr(interrupts, "leave_now", leave_now)
    went_on = []
    with interrupts.interrupts_raised():
        with pytest.raises(SystemExit):
            with interrupts.interrupts_end_at_once("loading torch"):
                _signal_self(signal.SIGTERM)
                went_on.append(True)
        with pytest.raises(Interrupted):  # after the block, the run's own handler again
            _signal_self(signal.SIGINT)
    assert left == ["preflight: stopped (SIGTERM) while loading torch; exit 4"] and went_on == []


def test_children_started_in_the_block_begin_with_both_signals_blocked_and_this_process_still_receives_them(
        ) -> None:
    """`preflight launch` starts ranks and the forkserver with SIGINT/SIGTERM blocked: a signal waits for
    their handlers. The launcher itself still gets its signal (a thread of its keeps both unblocked)."""
    import subprocess
    import sys

    show_mask = "import signal; print(*(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))"
    with interrupts.interrupts_raised():
        with interrupts.children_start_with_signals_held():
            child = subprocess.run([sys.executable, "-c", show_mask], capture_output=True, text=True, check=True)
            with pytest.raises(Interrupted, match="received SIGTERM"):
                _signal_self(signal.SIGTERM)
                time.sleep(0.5)
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the mask as it was
    blocked = {int(number) for number in child.stdout.split()}
    assert {int(signal.SIGINT), int(signal.SIGTERM)} <= blocked
