"""Deadlines that scale with the work: rank 0 shows it is alive and working; followers wait while it is.

After the exchange, every other rank waits for rank 0's "go" and "verdict". How long rank 0
takes for the cross checks, the report and its renderers grows with N, so no fixed deadline
fits every job: too short and a 30,000-rank job's followers exit 4 ("no verdict") while rank 0
says 3; too long and a dead rank 0 keeps a large allocation idle.

So rank 0 publishes a heartbeat (a counter in the store, `HEARTBEAT_KEY`) from a daemon thread
every `BEAT_S` seconds, but only while its work moves: each stage it enters (`Heartbeat.stage`)
opens a budget sized to N (`stage_budget_s`), and a stage that overruns its budget (a hung
check, a stuck filesystem) stops the beat. A follower's deadline is its usual one, pushed to
at least `STALL_S` after the last beat it saw: it waits as long as rank 0 is alive and working,
and gives up `STALL_S` after it stopped.
"""

from __future__ import annotations

import threading
import time
from typing import Any

HEARTBEAT_KEY = "heartbeat"
BEAT_S = 2.0  # rank 0 beats this often
STALL_S = 30.0  # a follower gives up this long after the last beat it saw (well above BEAT_S)


def stage_budget_s(world_size: int) -> float:
    """The longest one rank-0 stage may go on beating: 60 s, plus 10 s per 1,024 ranks.

    Measured (docs/performance.md): rank 0's heaviest stage at 16,384 ranks takes ~2 s on a
    2-core machine, so the budget is generous on purpose; it only bounds a hung stage."""
    return 60.0 + 10.0 * world_size / 1024


class Heartbeat:
    """Rank 0's beat: a daemon thread adding 1 to HEARTBEAT_KEY while the current stage is in budget."""

    def __init__(self, store: Any, world_size: int, beat_s: float = BEAT_S) -> None:
        self.store, self.beat_s = store, beat_s
        self.budget_s = stage_budget_s(world_size)
        self.stage_started = time.monotonic()
        self.stage_name = "collect"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="preflight-heartbeat")

    def start(self) -> Heartbeat:
        """Begin beating (nothing without a store)."""
        if self.store is not None:
            self._thread.start()
        return self

    def stage(self, name: str) -> None:
        """Rank 0 entered a new stage: its budget starts now."""
        self.stage_name, self.stage_started = name, time.monotonic()

    def stop(self) -> None:
        """The verdict is out (or the run ends): no more beats."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.beat_s):
            if time.monotonic() - self.stage_started > self.budget_s:
                continue  # a stage past its budget: let the followers' deadline run out
            try:
                self.store.add(HEARTBEAT_KEY, 1)
            except Exception:
                return  # the store is gone; followers will see no more beats


STORE_LOST_GRACE_S = 10.0


class Liveness:
    """A follower's view of rank 0's heartbeat: extends a deadline while the beat advances."""

    def __init__(self, store: Any, timeout_s: float, stall_s: float = STALL_S) -> None:
        self.store, self.stall_s = store, stall_s
        self.deadline = time.monotonic() + timeout_s
        self.last_beat = -1
        self.last_beat = self._beat()  # beats before the wait began do not count

    def time_left(self) -> float:
        """Seconds until this follower gives up; each new beat pushes that to at least stall_s."""
        beat = self._beat()
        if beat > self.last_beat:
            self.last_beat = beat
            self.deadline = max(self.deadline, time.monotonic() + self.stall_s)
        return self.deadline - time.monotonic()

    def _beat(self) -> int:
        if self.store is None:
            return self.last_beat
        try:
            return int(self.store.add(HEARTBEAT_KEY, 0))
        except Exception:
            # The store is gone, and with it rank 0, which hosts it: nothing more will beat. A
            # verdict can still come through --out-dir for a short grace, not the whole deadline.
            self.store = None
            self.deadline = min(self.deadline, time.monotonic() + STORE_LOST_GRACE_S)
            return self.last_beat
