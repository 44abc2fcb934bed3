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

The same beat, the other way round, during the probes: every other rank beats under its own
key (`peer_key`) and rank 0 watches them (`DeadPeers`). A rank whose beat stopped for
`PEER_STALL_S` is dead (killed, crashed, or frozen): rank 0 publishes it under `DEAD_KEY`, and
every rank's probe waits end early instead of running out --probe-timeout
(probes/liveness.py).
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

HEARTBEAT_KEY = "heartbeat"
BEAT_S = 2.0  # rank 0 beats this often
STALL_S = 30.0  # a follower gives up this long after the last beat it saw (well above BEAT_S)
PEER_BEAT_S = 1.0  # a probing rank beats this often
# A probing rank silent this long is dead. Well above PEER_BEAT_S: a daemon thread on a loaded
# 2-core machine, or a follower that saw the "go" a little late, must not be declared dead.
PEER_STALL_S = 10.0
DEAD_KEY = "dead"  # rank 0 publishes {rank: why} here once a probing rank stopped beating
CHUNK = 1024  # keys per multi_get / multi_set (one call of 65,536 keys resets the connection)


def peer_key(rank: int) -> str:
    """The store key a probing rank beats under."""
    return f"alive/{rank}"


def stage_budget_s(world_size: int) -> float:
    """The longest one rank-0 stage may go on beating: 60 s, plus 10 s per 1,024 ranks.

    Measured (docs/performance.md): rank 0's heaviest stage at 16,384 ranks takes ~2 s on a
    2-core machine, so the budget is generous on purpose; it only bounds a hung stage."""
    return 60.0 + 10.0 * world_size / 1024


class Heartbeat:
    """Rank 0's beat: a daemon thread adding 1 to HEARTBEAT_KEY while the current stage is in budget."""

    def __init__(self, store: Any, world_size: int, beat_s: float = BEAT_S, *, key: str = HEARTBEAT_KEY,
                 budget_s: float | None = None) -> None:
        self.store, self.beat_s, self.key = store, beat_s, key
        self.budget_s = stage_budget_s(world_size) if budget_s is None else budget_s
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
        while True:  # the first beat at once: a rank that dies a moment later has beaten
            if time.monotonic() - self.stage_started <= self.budget_s:  # past it: let the deadline run out
                try:
                    self.store.add(self.key, 1)
                except Exception:
                    return  # the store is gone; followers will see no more beats
            if self._stop.wait(self.beat_s):
                return


def peer_heartbeat(store: Any, rank: int) -> Heartbeat:
    """A probing rank's beat: under its own key, for as long as the process lives (no stage budget).

    A rank stuck inside a collective is alive and keeps beating (the collective's wait releases
    the GIL); only a dead or frozen process stops."""
    return Heartbeat(store, 0, PEER_BEAT_S, key=peer_key(rank), budget_s=math.inf)


def stalled_beats(store: Any, ranks: list[int], seen: dict[int, tuple[bytes, float]], now: float,
                  stall_s: float) -> dict[int, tuple[bytes, float]]:
    """One look at `ranks`' beat counters (one multi_get per CHUNK ranks).

    `seen` (rank -> (last value, since when)) is updated with every counter that moved; the
    answer is each rank whose counter has not moved for stall_s: rank -> (its value, seconds silent).
    """
    stalled: dict[int, tuple[bytes, float]] = {}
    for i in range(0, len(ranks), CHUNK):
        chunk = ranks[i:i + CHUNK]
        for rank, value in zip(chunk, store.multi_get([peer_key(r) for r in chunk]), strict=True):
            last, since = seen.get(rank, (b"", now))
            if value != last:
                seen[rank] = (bytes(value), now)
            elif now - since >= stall_s:
                stalled[rank] = (bytes(value), now - since)
    return stalled


class DeadPeers:
    """Rank 0's watch over the probing ranks' beats: who stopped, published under DEAD_KEY.

    A daemon thread reads every watched rank's counter (multi_get in chunks; rank 0 creates
    the keys first, so a rank that never beat is read as 0, never waited for) every poll_s,
    and declares dead a rank whose counter did not move for stall_s.
    """

    def __init__(self, store: Any, ranks: list[int], stall_s: float = PEER_STALL_S,
                 poll_s: float = PEER_BEAT_S) -> None:
        self.store, self.ranks, self.stall_s, self.poll_s = store, list(ranks), stall_s, poll_s
        self.dead: dict[int, str] = {}
        self._seen: dict[int, tuple[bytes, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="preflight-dead-peers")

    def start(self) -> DeadPeers:
        """Create every beat key (one multi_set per 1,024 ranks), then watch.

        A counter a rank already advanced is set back to 0: harmless, a change is a change."""
        for i in range(0, len(self.ranks), CHUNK):
            chunk = [peer_key(r) for r in self.ranks[i:i + CHUNK]]
            self.store.multi_set(chunk, ["0"] * len(chunk))
        now = time.monotonic()
        self._seen = {r: (b"", now) for r in self.ranks}
        self._thread.start()
        return self

    def stop(self) -> None:
        """The probes are over: stop watching."""
        self._stop.set()

    def look(self, now: float | None = None) -> dict[int, str]:
        """One look at every counter; the dead ranks so far (published under DEAD_KEY when new)."""
        now = time.monotonic() if now is None else now
        alive = [r for r in self.ranks if r not in self.dead]
        newly = {}
        for rank, (value, silent_s) in stalled_beats(self.store, alive, self._seen, now, self.stall_s).items():
            newly[rank] = (f"its heartbeat stopped {silent_s:.0f}s ago (the process was killed, "
                           "crashed or froze)" if value not in (b"", b"0") else
                           f"never sent a heartbeat in {silent_s:.0f}s (the process was killed, "
                           "crashed or froze)")
        if newly:
            self.dead.update(newly)
            self.store.set(DEAD_KEY, json.dumps({str(r): why for r, why in self.dead.items()}))
        return dict(self.dead)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.look()
            except Exception:
                return  # the store is gone (rank 0 is its host): nothing left to watch


def read_dead(store: Any) -> dict[int, str]:
    """The dead ranks rank 0 published (DEAD_KEY), rank -> why; {} while there are none."""
    try:
        if not store.check([DEAD_KEY]):
            return {}
        return {int(r): str(why) for r, why in json.loads(store.get(DEAD_KEY)).items()}
    except Exception:
        return {}


STORE_LOST_GRACE_S = 10.0


class Liveness:
    """A follower's view of rank 0's heartbeat: extends a deadline while the beat advances."""

    def __init__(self, store: Any, timeout_s: float, stall_s: float = STALL_S) -> None:
        self.store, self.stall_s = store, stall_s
        self.deadline = time.monotonic() + timeout_s
        if store is None:  # already lost (rank 0 is gone): only --out-dir can answer, for a short grace
            self.deadline = min(self.deadline, time.monotonic() + STORE_LOST_GRACE_S)
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
