"""Is that rank alive? One concept, one owner: `RankLiveness`, one per rank per run, built once
(channel/exchange.py) and used by the runner, the channel and the probes alike.

It rests on one mechanism, a beat: a counter in the store a daemon thread adds 1 to.

Rank 0's beat (`HEARTBEAT_KEY`, every `BEAT_S`) says it is alive and working, but only while
its work moves: each stage it enters (`stage`) opens a budget sized to N (`stage_budget_s`),
and a stage that overruns its budget (a hung check, a stuck filesystem) stops the beat. How
long rank 0 takes for the cross checks, the report and its renderers grows with N, so no fixed
deadline fits every follower: a follower's deadline is its usual one, pushed to at least
`STALL_S` after the last beat it saw (`lead_deadline`).

Every other rank beats under its own key (`alive/<rank>`) from its claim in the store until it
leaves. Rank 0 watches those beats from the collect until it leaves, from one daemon thread
(`lead`), and keeps what it learned in one place: the ranks that are gone (`dead`), each with
why. A rank is gone when its beat did not move for `stall_s(N)` (killed, crashed or frozen),
or when it said it left (`leave`: a signal, its own deadline; one `RankLeft` under
`left/<rank>`, listed under `left`). Each use reads that one set, never learning anew: the
collect stops waiting for a rank that joined and went silent (RUN008), the probes' waits end
early (published under `DEAD_KEY` for every rank, probes/liveness.py), and the verdict's
hand-off keeps the store up only for the ranks still alive that have not read it
(`await_acknowledgements`).

A beat says the process lives, not that its work moves: a rank stuck for good inside a
collective beats on from its daemon thread. When the probes name such a rank (it sent no
results by rank 0's deadline: `hung`), it is alive but will never read the verdict, so the
hand-off does not keep the job waiting for it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from preflight.channel.board import Board, fetch_raw, read_value, set_raw_many, write_value
from preflight.channel.keys import (
    ACKED_KEY,
    CLAIMED_KEY,
    DEAD_KEY,
    HEARTBEAT_KEY,
    LEFT_KEY,
    append_rank,
    beat_key,
    left_key,
    listed_ranks,
)
from preflight.lib.errors import one_line
from preflight.lib.waiting import FIRST_POLL_S
from preflight.model.messages import DeadRanks, RankLeft

BEAT_S = 2.0  # rank 0 beats this often
STALL_S = 30.0  # a follower gives up this long after the last beat it saw (well above BEAT_S)
PEER_BEAT_S = 1.0  # every other rank beats this often (up to 4,096 ranks)
# A rank silent this long is dead. Well above PEER_BEAT_S: a daemon thread on a loaded 2-core
# machine, or a follower that saw the "go" a little late, must not be declared dead.
PEER_STALL_S = 10.0
STORE_LOST_GRACE_S = 10.0  # a follower whose store is gone waits this long for --out-dir's verdict
ACKNOWLEDGE_CAP_S = 30.0  # the longest rank 0 keeps the store up for ranks that beat but have not acknowledged
HANDOFF_POLL_S = 0.05  # rank 0 looks at the acknowledgements this often (two reads of rank lists)


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


class _Beat:
    """A daemon thread adding 1 to `key` every beat_s while the current stage is in budget."""

    def __init__(self, store: Any, key: str, beat_s: float, budget_s: float = math.inf,
                 on_lost: Callable[[BaseException], None] | None = None) -> None:
        self.store, self.key, self.beat_s, self.budget_s, self.on_lost = store, key, beat_s, budget_s, on_lost
        self.stage_started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="preflight-beat")
        self._thread.start()

    def stage(self) -> None:
        """A new stage began: its budget starts now."""
        self.stage_started = time.monotonic()

    def stop(self) -> None:
        """No more beats."""
        self._stop.set()

    def stopped(self) -> bool:
        """Whether stop() was called."""
        return self._stop.is_set()

    def _run(self) -> None:
        while True:  # the first beat at once: a rank that dies a moment later has beaten
            if time.monotonic() - self.stage_started <= self.budget_s:  # past it: let the deadline run out
                try:
                    self.store.add(self.key, 1)
                except Exception as exc:
                    if self.on_lost is not None:
                        self.on_lost(exc)
                    return  # the store is gone; nobody will see more beats
            if self._stop.wait(self.beat_s):
                return


class _LeadDeadline:
    """A follower's view of rank 0's heartbeat: a deadline pushed on while the beat advances, and cut
    short once the store is lost (`RankLiveness.lead_lost`): rank 0, which hosts it, is gone, and only
    --out-dir can still answer, within one grace counted from the loss (not one per wait)."""

    def __init__(self, owner: RankLiveness, timeout_s: float, stall_s: float = STALL_S) -> None:
        self.owner, self.stall_s = owner, stall_s
        self.deadline = time.monotonic() + timeout_s
        if owner.store is None:  # never had one (rank 0 unreachable from the start): --out-dir only, briefly
            self.deadline = min(self.deadline, owner.without_store_since() + owner.lost_grace_s)
        self.last_beat = -1
        self.last_beat = self._beat()  # beats before the wait began do not count

    def time_left(self) -> float:
        """Seconds until this follower gives up; each new beat pushes that to at least stall_s."""
        beat = self._beat()
        if beat > self.last_beat:
            self.last_beat = beat
            self.deadline = max(self.deadline, time.monotonic() + self.stall_s)
        if (lost := self.owner.lost()) is not None:
            self.deadline = min(self.deadline, lost[0] + self.owner.lost_grace_s)
        return self.deadline - time.monotonic()

    def _beat(self) -> int:
        store = self.owner.store
        if store is None or self.owner.lost() is not None:
            return self.last_beat
        try:
            return int(store.add(HEARTBEAT_KEY, 0))  # add returns the counter: an int, never a peer's text
        except Exception as exc:
            # The store is gone, and with it rank 0, which hosts it: nothing more will beat. A
            # verdict can still come through --out-dir for a short grace, not the whole deadline.
            self.owner.lead_lost(exc)
            return self.last_beat


def read_dead(store: Any) -> dict[int, str]:
    """The dead ranks rank 0 published (DEAD_KEY), rank -> why; {} while there are none."""
    try:
        value = read_value(store, DEAD_KEY, DeadRanks, rank=0)
    except Exception:  # the store is gone
        return {}
    return dict(value.ranks) if isinstance(value, DeadRanks) else {}  # none yet, or not rank 0's (ignored)


class RankLiveness:
    """Is that rank alive? The one owner of the question, for this rank in this run.

    This rank's own beat (`joined`, `lead`, `stop`, `leave`); on rank 0 one watch over every
    other rank's beat and word of leaving, from the collect until it leaves, and the one set of
    ranks known gone (`dead`), which every later use reads instead of learning it again: the
    collect, the probes' waits (published under DEAD_KEY; on other ranks `dead` reads that) and
    the verdict's hand-off (`await_acknowledgements`). A rank is gone when its own beat stopped
    or it said it left, never because some bookkeeping stopped counting it.
    """

    def __init__(self, world_size: int, rank: int, store: Any = None, *, stall: float | None = None,
                 poll_s: float | None = None, lost_grace_s: float = STORE_LOST_GRACE_S) -> None:
        self.world_size, self.rank, self.store = world_size, rank, store
        # A follower whose store is lost waits at most this long more, counted once from the loss.
        self.lost_grace_s = lost_grace_s
        self._lost: tuple[float, str] | None = None  # (when, why) this follower lost the store
        self._without_store_since: float | None = None
        self.stall_s = stall_s(world_size) if stall is None else stall
        self.poll_s = beat_s(world_size) if poll_s is None else poll_s
        self._beat: _Beat | None = None
        self._lead: _Beat | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._lock = threading.Lock()
        self._watched: set[int] = set()  # rank 0: ranks beyond the claimed ones (the probes' world)
        self._seen: dict[int, tuple[bytes, float]] = {}  # rank -> (its last beat value, since when)
        self._gone: dict[int, str] = {}  # rank -> why it is not alive: the one dead set
        self._hung: dict[int, str] = {}  # rank -> where its work stopped: alive, but it will not read the verdict
        self._published = 0  # how many of _gone are under DEAD_KEY
        self._dead_read: dict[int, str] = {}
        self._dead_read_at = -math.inf

    # -- this rank's own beat --------------------------------------------------------------

    def joined(self, store: Any) -> None:
        """This rank's claim is in `store`: a rank other than 0 beats under `alive/<rank>` until it leaves."""
        self.store = store
        if self.rank != 0 and self._beat is None and store is not None:
            self._beat = _Beat(store, beat_key(self.rank), beat_s(self.world_size), on_lost=self.lead_lost)

    def beating(self) -> bool:
        """Whether this rank's own beat runs."""
        return self._beat is not None and not self._beat.stopped()

    def lead(self) -> None:
        """Rank 0: beat under HEARTBEAT_KEY while each stage is in budget, and watch every other rank."""
        if self.store is None or self._lead is not None:
            return
        self._lead = _Beat(self.store, HEARTBEAT_KEY, BEAT_S, stage_budget_s(self.world_size))
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="preflight-liveness")
        self._watcher.start()

    def stage(self, name: str) -> None:
        """Rank 0 entered a new stage (`name`, for the phase hook): its beat's budget starts now."""
        if self._lead is not None:
            self._lead.stage()

    def verdict_out(self) -> None:
        """Rank 0 published the verdict: followers stop waiting on its beat."""
        if self._lead is not None:
            self._lead.stop()

    def stop(self) -> None:
        """This rank leaves: no more beats, no more watching."""
        self._stop.set()
        for part in (self._beat, self._lead):
            if part is not None:
                part.stop()

    def leave(self, why: str) -> None:
        """This rank leaves without the verdict (a signal, its own deadline): it says so, then stops.

        One RankLeft under `left/<rank>`, listed under LEFT_KEY, before the beat stops: rank 0
        then stops waiting for it at once instead of after stall_s of silence."""
        if self.store is not None and self.rank != 0 and self._lost is None:
            try:
                write_value(self.store, left_key(self.rank), RankLeft(why[:500]))
                append_rank(self.store, LEFT_KEY, self.rank)
                # c10d's set and append get no answer: one round trip on the same connection makes
                # sure the store applied both before this rank goes on (it may exit at once, and
                # rank 0 must see it left; under load the server was seen applying them later).
                self.store.check([LEFT_KEY])
            except Exception:
                pass  # the store is gone: rank 0, its host, waits for nobody any more
        self.stop()

    # -- the others: rank 0's watch ----------------------------------------------------------

    def watch(self, ranks: list[int]) -> None:
        """Rank 0: watch `ranks` too (the probes' world), not only the ranks that claimed.

        Their beat keys are made first (one multi_set per 1,024 ranks), so a rank that never beat
        reads as 0 and is never waited for; a counter a rank already advanced is set back to 0:
        harmless, a change is a change."""
        if self.store is None:
            return
        new = sorted(set(ranks) - self._watched - listed_ranks(self.store, CLAIMED_KEY, self.world_size)
                     - {self.rank})
        set_raw_many(self.store, [beat_key(r) for r in new], "0")
        with self._lock:
            self._watched |= set(new)

    def look(self, now: float | None = None) -> dict[int, str]:
        """One look at every watched rank (the claimed ones and `watch`'s): who left, whose beat
        stopped; the ranks gone so far (published under DEAD_KEY when new). The watch thread calls
        it every beat; a test may call it with its own clock."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._take_left()
            ranks = sorted((listed_ranks(self.store, CLAIMED_KEY, self.world_size) | self._watched)
                           - {self.rank} - self._gone.keys())
            for rank, raw in zip(ranks, fetch_raw(self.store, [beat_key(r) for r in ranks]), strict=True):
                value = raw or b""  # a key not there yet reads as never beaten
                last, since = self._seen.get(rank, (None, now))
                if value != last:
                    self._seen[rank] = (value, now)
                elif now - since >= self.stall_s:
                    self._gone[rank] = (f"its heartbeat stopped {now - since:.0f}s ago (the process was killed, "
                                        "crashed or froze)" if value not in (b"", b"0") else
                                        f"never sent a heartbeat in {now - since:.0f}s (the process was killed, "
                                        "crashed or froze)")
            self._publish()
            return dict(self._gone)

    def _take_left(self) -> None:
        """Ranks that said they left (the list, then each one's RankLeft): gone, with their word."""
        new = sorted(listed_ranks(self.store, LEFT_KEY, self.world_size) - self._gone.keys() - {self.rank})
        for rank, said in zip(new, Board(self.store).fetch([left_key(r) for r in new], new), strict=True):
            why = said.why if isinstance(said, RankLeft) else "its reason did not arrive or did not read"
            self._gone[rank] = f"it left the run ({why})"

    def _publish(self) -> None:
        if len(self._gone) > self._published:
            write_value(self.store, DEAD_KEY, DeadRanks(dict(self._gone)))
            self._published = len(self._gone)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.look()
            except Exception:
                return  # the store is gone (rank 0 is its host): nothing left to watch

    def hung(self, ranks: dict[int, str]) -> None:
        """Rank 0: these ranks beat but their work stopped for good (rank -> where: the probes found
        them sending no results by the deadline). Not dead (their process lives, and the report
        names them as hung, not killed); the verdict's hand-off does not wait for them."""
        with self._lock:
            self._hung.update({r: why for r, why in ranks.items() if r != self.rank})

    def still_running(self, unread: list[int]) -> dict[int, str]:
        """Of the ranks that never read the verdict (`await_acknowledgements`), those whose process
        may still run (not known gone), rank -> why: named hung, or beating when the cap ran out."""
        with self._lock:
            return {r: f"hung: {self._hung[r]}" if r in self._hung else
                    "still beating when the hand-off's cap ran out" for r in unread if r not in self._gone}

    def dead(self) -> dict[int, str]:
        """The ranks known gone, rank -> why: rank 0's own knowledge, or what rank 0 published
        (read at most once per beat)."""
        if self._lead is not None:
            with self._lock:
                return dict(self._gone)
        now = time.monotonic()
        if (self.store is not None and self._lost is None and not self._dead_read
                and now - self._dead_read_at >= PEER_BEAT_S):
            self._dead_read_at = now
            self._dead_read = read_dead(self.store)
        return dict(self._dead_read)

    def abort_reason(self) -> str:
        """Why the probes must stop now ("" to go on): the ranks known dead, named."""
        lost = [f"rank 0 is gone: the store closed the connection ({self._lost[1]})"] if self._lost else []
        return "; ".join(lost + [f"rank {r} is dead: {why}" for r, why in sorted(self.dead().items())])

    # -- a follower waiting for rank 0 ---------------------------------------------------------

    def lead_deadline(self, timeout_s: float) -> _LeadDeadline:
        """A follower: a deadline of timeout_s, pushed on while rank 0's beat advances, and at most
        lost_grace_s after the store was lost."""
        return _LeadDeadline(self, timeout_s)

    def lead_lost(self, why: BaseException | str) -> None:
        """A follower's call on the store failed: rank 0, which hosts it, is gone (or this rank's
        connection to it is). The first word is kept; every wait from now on ends within lost_grace_s."""
        if self.rank != 0 and self._lost is None:
            text = why if isinstance(why, str) else f"{type(why).__name__}: {one_line(why, 200)}"
            self._lost = (time.monotonic(), text)

    def without_store_since(self) -> float:
        """A follower that never had the store: since when it waits without one (the first wait's start),
        so that its waits share one grace, as a lost store's do."""
        if self._without_store_since is None:
            self._without_store_since = time.monotonic()
        return self._without_store_since

    def lost(self) -> tuple[float, str] | None:
        """When (monotonic seconds) and why this follower lost the store; None while it has it."""
        return self._lost

    # -- the verdict's hand-off ------------------------------------------------------------

    def acknowledge(self) -> None:
        """A follower has read the verdict: rank 0 may stop waiting for it."""
        if self.store is not None:
            try:
                append_rank(self.store, ACKED_KEY, self.rank)
            except Exception:
                pass  # rank 0 took the store down: it no longer waits

    def await_acknowledgements(self, cap_s: float | None = None, poll_s: float = HANDOFF_POLL_S) -> list[int]:
        """Rank 0, once the verdict is out: keep the store up until every rank that joined has read
        it or is gone, at most cap_s (ACKNOWLEDGE_CAP_S); the ranks that never acknowledged (beating
        still when cap_s ran out, or gone).

        Who is waited for is who is alive: every rank that joined (CLAIMED_KEY), whatever rank 0's
        bookkeeping says of it (a refused payload, a contested rank's first claimant), minus the
        ranks known gone. What the watch learned since the collect counts: a rank silent since the
        probes, or one that said it left, is not waited for again; nor is a rank the probes named
        hung (`hung`): its beat goes on, but it will never read anything."""
        if self.store is None:
            return []
        cap_s = ACKNOWLEDGE_CAP_S if cap_s is None else cap_s
        started = time.monotonic()
        # Backed off from 5 ms to poll_s: a small job's acknowledgements come within a few ms of the
        # verdict, and preflight.check's rank 0 returns to the trainer then, not a whole poll_s later.
        pause = min(FIRST_POLL_S, poll_s)
        while True:
            try:
                with self._lock:
                    self._take_left()
                    not_awaited = set(self._gone) | set(self._hung)
                unread = (listed_ranks(self.store, CLAIMED_KEY, self.world_size)
                          - listed_ranks(self.store, ACKED_KEY, self.world_size) - {self.rank})
            except Exception:
                return []  # the store is gone: nobody can read anything more
            if not unread - not_awaited or time.monotonic() - started >= cap_s:
                return sorted(unread)
            time.sleep(pause)
            pause = min(2 * pause, poll_s)
