"""Rank 0's phase display: one line per phase in a log, a rich display on a terminal."""

from __future__ import annotations

import io

from preflight.steps.phases import PhaseDisplay, phase_display


def test_log_gets_one_line_per_phase() -> None:
    stream = io.StringIO()
    display = PhaseDisplay(stream, live=False)
    display.start("facts")
    display.done("facts", 0.0123)
    display.start("exchange")
    display.done("exchange", 2.5, failed=True)
    assert stream.getvalue().splitlines() == ["preflight: facts done in 0.01s",
                                              "preflight: exchange interrupted in 2.50s"]


def test_terminal_display_marks_each_phase() -> None:
    stream = io.StringIO()
    display = PhaseDisplay(stream, live=True)
    display.start("facts")
    display.done("facts", 0.5)
    assert "✓ facts 0.50 s" in stream.getvalue()


def test_only_rank_zero_and_never_quiet() -> None:
    assert phase_display(1, quiet=False) is None
    assert phase_display(0, quiet=True) is None
    assert phase_display(0, quiet=False, stream=io.StringIO()).live is False  # not a TTY: plain lines
