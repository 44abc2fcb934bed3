"""Each step's time (meta.phases), and rank 0's phases as they happen: a live spinner on a
terminal, one line per phase in a log.

Written to stderr, so stdout stays the report alone (what a script or a test parses).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from preflight.reports.common import wants_rich


class PhaseDisplay:
    """Told by the runner when each phase starts and ends; shows it on `stream`."""

    def __init__(self, stream: TextIO, live: bool) -> None:
        self.stream, self.live = stream, live
        self.console: Any = None
        if live:  # rich only for a terminal: a quiet run (preflight.check) never imports it
            from rich.console import Console

            self.console = Console(file=stream, highlight=False)
        self._status: Any = None

    def start(self, name: str) -> None:
        """A phase began: on a terminal, a spinner with its name until it ends."""
        if self.console is not None:
            from rich.text import Text

            self._status = self.console.status(Text(f"preflight: {name}..."), spinner="dots")
            self._status.start()

    def done(self, name: str, seconds: float, failed: bool = False) -> None:
        """A phase ended (failed: it raised, e.g. the run was interrupted)."""
        state = "interrupted" if failed else "done"
        if self.console is not None:
            if self._status is not None:
                self._status.stop()
                self._status = None
            from rich.text import Text

            mark = ("✗", "bold red") if failed else ("✓", "green")
            self.console.print(Text.assemble(mark, f" {name} ", (f"{seconds:.2f} s", "dim"),
                                             f" {state}" if failed else ""))
        else:
            self.stream.write(f"preflight: {name} {state} in {seconds:.2f}s\n")
            self.stream.flush()


def phase_display(rank: int, quiet: bool, stream: TextIO | None = None) -> PhaseDisplay | None:
    """The display for this rank: rank 0 only (N ranks writing the same lines would be noise), never --quiet."""
    if rank != 0 or quiet:
        return None
    stream = stream or sys.stderr
    return PhaseDisplay(stream, live=wants_rich(stream))


class Phases:
    """Times each step into a dict (the report's `meta.phases`) and shows it on rank 0's display."""

    def __init__(self, display: PhaseDisplay | None) -> None:
        self.display = display
        self.seconds: dict[str, float] = {}
        self.on_step: Callable[[str], None] | None = None  # told each step's name as it starts (heartbeat)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time the body as phase `name`; an exception (an interrupt) marks it failed and goes on up."""
        started = time.perf_counter()
        if self.on_step:
            self.on_step(name)
        if self.display:
            self.display.start(name)
        failed = True
        try:
            yield
            failed = False
        finally:
            self.seconds[name] = round(time.perf_counter() - started, 4)
            if self.display:
                self.display.done(name, self.seconds[name], failed=failed)
