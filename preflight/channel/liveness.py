"""Is that rank alive? One concept, one owner (`RankLiveness`), built on one mechanism: a beat.

Deadlines that scale with the work: rank 0 shows it is alive and working; followers wait while it is.

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

The same beat, the other way round: every other rank beats under its own key (`peer_key`)
from its claim in the store until it leaves, and rank 0 looks at those beats: in the collect (a
rank that joined and went silent died during the exchange), during the probes (`DeadPeers`: a
rank silent for `PEER_STALL_S` is dead, published under `DEAD_KEY`, and every rank's probe
waits end early instead of running out --probe-timeout, probes/liveness.py), and while it keeps
the store up for the verdict (it waits for every rank that still beats).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from preflight.channel.board import fetch_raw, read_value, set_raw_many, write_value
from preflight.channel.keys import ACKED_KEY, CLAIMED_KEY, DEAD_KEY, HEARTBEAT_KEY, append_rank, beat_key, listed_ranks
from preflight.model.messages import DeadRanks

BEAT_S = 2.0  # rank 0 beats this often
STALL_S = 30.0  # a follower gives up this long after the last beat it saw (well above BEAT_S)
PEER_BEAT_S = 1.0  # a probing rank beats this often
# A probing rank silent this long is dead. Well above PEER_BEAT_S: a daemon thread on a loaded
# 2-core machine, or a follower that saw the "go" a little late, must not be declared dead.
PEER_STALL_S = 10.0


peer_key = beat_key  # the store key a rank beats under


def beat_s(world_size: int) -> float:
    """How often a joined rank beats: every second up to 4,096 ranks, then slower (the store's load)."""
    return max(PEER_BEAT_S, world_size / 4096)


def stall_s(world_size: int) -> float:
    """How long a joined rank may be silent before rank 0 calls it dead: 10 beats, at least 10 s."""
    return max(PEER_STALL_S, 10 * beat_s(world_size))


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

    def stopped(self) -> bool:
        """Whether stop() was called."""
        return self._stop.is_set()

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
    """One look at `ranks`' beat counters (board.fetch_raw: one multi_get per 1,024 ranks).

    `seen` (rank -> (last value, since when)) is updated with every counter that moved; the
    answer is each rank whose counter has not moved for stall_s: rank -> (its value, seconds silent).
    """
    stalled: dict[int, tuple[bytes, float]] = {}
    for rank, raw in zip(ranks, fetch_raw(store, [peer_key(r) for r in ranks]), strict=True):
        value = raw or b""  # a key not there yet reads as never beaten
        last, since = seen.get(rank, (b"", now))
        if value != last:
            seen[rank] = (value, now)
        elif now - since >= stall_s:
            stalled[rank] = (value, now - since)
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
        set_raw_many(self.store, [peer_key(r) for r in self.ranks], "0")
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
            write_value(self.store, DEAD_KEY, DeadRanks({r: why for r, why in self.dead.items()}))
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
        value = read_value(store, DEAD_KEY, DeadRanks, rank=0)
    except Exception:  # the store is gone
        return {}
    return dict(value.ranks) if isinstance(value, DeadRanks) else {}  # none yet, or not rank 0's (ignored)


STORE_LOST_GRACE_S = 10.0


class LeadDeadline:
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
            return int(self.store.add(HEARTBEAT_KEY, 0))  # add returns the counter: an int, never a peer's text
        except Exception:
            # The store is gone, and with it rank 0, which hosts it: nothing more will beat. A
            # verdict can still come through --out-dir for a short grace, not the whole deadline.
            self.store = None
            self.deadline = min(self.deadline, time.monotonic() + STORE_LOST_GRACE_S)
            return self.last_beat

ACKNOWLEDGE_CAP_S = 30.0  # the longest rank 0 keeps the store up for ranks that beat but have not acknowledged


class RankLiveness:
    """Is that rank alive? The one owner of the question, for this rank in this run.

    Every rank that joined the store beats under `alive/<rank>` from its claim until it leaves
    (`beat` / `stop`): while it publishes, probes, after its probe steps ended early (gloo's
    "connection reset" once a peer died) and while it waits for the verdict. Rank 0 beats under
    HEARTBEAT_KEY while its stage is in budget (`lead`), and looks at the others' beats: during
    the collect (`silent`), during the probes (`watch`, published under DEAD_KEY for every
    rank's waits, `dead`) and while it keeps the store up for the verdict
    (`await_acknowledgements`). A follower's deadline follows rank 0's beat (`lead_deadline`).
    A rank is dead when its own beat stopped, never because some bookkeeping stopped counting it.
    """

    def __init__(self, store: Any, world_size: int, rank: int) -> None:
        self.store, self.world_size, self.rank = store, world_size, rank
        self._beat: Heartbeat | None = None
        self._lead: Heartbeat | None = None
        self._peers: DeadPeers | None = None
        self._seen: dict[int, tuple[bytes, float]] = {}
        self._dead_read: dict[int, str] = {}
        self._dead_read_at = -math.inf

    # -- this rank's own beat --------------------------------------------------------------

    def beat(self) -> None:
        """Start this rank's beat under `alive/<rank>` (once; it runs until `stop`)."""
        if self._beat is None and self.store is not None:
            self._beat = Heartbeat(self.store, 0, beat_s(self.world_size), key=peer_key(self.rank),
                                   budget_s=math.inf).start()

    def beating(self) -> bool:
        """Whether this rank's own beat runs."""
        return self._beat is not None and not self._beat.stopped()

    def lead(self) -> Heartbeat:
        """Rank 0: beat under HEARTBEAT_KEY while each stage is in budget (followers wait while it does)."""
        if self._lead is None:
            self._lead = Heartbeat(self.store, self.world_size).start()
        return self._lead

    def stop(self) -> None:
        """This rank leaves: no more beats, no more watching."""
        for part in (self._beat, self._lead, self._peers):
            if part is not None:
                part.stop()

    # -- the others' beats -------------------------------------------------------------------

    def silent(self, ranks: list[int], now: float | None = None, stall: float | None = None
               ) -> dict[int, tuple[bytes, float]]:
        """One look at `ranks`' beats: each one silent for stall_s(N) -> (its last value, seconds silent)."""
        now = time.monotonic() if now is None else now
        return stalled_beats(self.store, ranks, self._seen, now, stall_s(self.world_size) if stall is None else stall)

    def watch(self, ranks: list[int], stall: float = PEER_STALL_S, poll_s: float = PEER_BEAT_S) -> None:
        """Rank 0: watch `ranks` from a daemon thread; a rank silent for `stall` is dead, published under DEAD_KEY."""
        self._peers = DeadPeers(self.store, ranks, max(stall, stall_s(self.world_size)), poll_s).start()

    def unwatch(self) -> None:
        """Rank 0: the probes are over; stop the watch (the dead it found stay known)."""
        if self._peers is not None:
            self._peers.stop()

    def dead(self) -> dict[int, str]:
        """The ranks known dead, rank -> why: rank 0's own watch, or what rank 0 published (read once per beat)."""
        if self._peers is not None:
            return dict(self._peers.dead)
        now = time.monotonic()
        if not self._dead_read and now - self._dead_read_at >= PEER_BEAT_S:
            self._dead_read_at = now
            self._dead_read = read_dead(self.store)
        return dict(self._dead_read)

    def lead_deadline(self, timeout_s: float) -> LeadDeadline:
        """A follower: a deadline of timeout_s, pushed on while rank 0's beat advances."""
        return LeadDeadline(self.store, timeout_s)

    # -- the verdict's hand-off ------------------------------------------------------------

    def acknowledge(self) -> None:
        """A follower has read the verdict: rank 0 may stop waiting for it."""
        if self.store is not None:
            try:
                append_rank(self.store, ACKED_KEY, self.rank)
            except Exception:
                pass  # rank 0 took the store down: it no longer waits

    def await_acknowledgements(self, known_dead: set[int], cap_s: float = ACKNOWLEDGE_CAP_S,
                               poll_s: float = 0.05) -> list[int]:
        """Rank 0, once the verdict is out: keep the store up until every rank that joined has read it
        or is not alive; the ranks that never acknowledged (beating still when cap_s ran out, or silent).

        Who is waited for is who beats: every rank that joined (CLAIMED_KEY), whatever rank 0's
        bookkeeping says of it (a refused payload, a contested rank's first claimant), minus the
        ranks known dead. A rank silent for stall_s(N) is not waited for any longer."""
        if self.store is None:
            return []
        started = time.monotonic()
        seen: dict[int, tuple[bytes, float]] = {}
        gone: set[int] = set()
        while True:
            try:
                unread = (listed_ranks(self.store, CLAIMED_KEY, self.world_size)
                          - listed_ranks(self.store, ACKED_KEY, self.world_size) - known_dead - {self.rank})
                now = time.monotonic()
                gone |= set(stalled_beats(self.store, sorted(unread - gone), seen, now, stall_s(self.world_size)))
            except Exception:
                return []  # the store is gone: nobody can read anything more
            if not unread - gone or now - started >= cap_s:
                return sorted(unread)
            time.sleep(poll_s)
