"""Each host's wall clock against rank 0's, from round trips through the run's store.

NTP's idea with one server: rank 0 answers pings from a thread of its own (its own store
connection, `store_join.side_client`, so the collect's calls never wait behind it). A measuring
rank (local rank 0 of each host) takes a ticket, notes its wall time t1, writes `clock/ping/<n>`
and waits for `clock/pong/<n>`, which carries rank 0's wall time s, read between t1 and the
answer's arrival t2. So rank 0's clock read s somewhere in [t1, t2]: the offset is
(t1 + t2) / 2 - s, within +- (t2 - t1) / 2. Of several samples the one with the shortest round
trip is kept (the tightest bound). t2 is t1 plus the elapsed monotonic time, so a wall clock
stepped during a sample cannot fake a round trip.

Only the store carries this; no port of its own. Rank 0 answers for at most the exchange's
deadline, and stops once the collect is over (each rank measures before publishing its payload)
or the run leaves (`Exchange.leave`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from preflight.channel.board import Board, count, present, read_value, write_value
from preflight.channel.keys import CLOCK_OPEN_KEY, CLOCK_TICKET_KEY, clock_ping_key, clock_pong_key
from preflight.channel.store_join import side_client
from preflight.lib.waiting import wait_until
from preflight.model import World
from preflight.model.placement_facts import ClockFacts, ClockStamp

SAMPLES = 5
SAMPLE_TIMEOUT_S = 2.0  # one round trip given up after this (rank 0 answers in milliseconds)
OPEN_WAIT_S = 5.0  # how long a measuring rank waits for rank 0's answerer to open
SIDE_JOIN_S = 5.0
SLICE_S = 0.25  # rank 0's answerer looks at its stop flag this often


class ClockServer:
    """Rank 0's answerer: a daemon thread on its own store connection, for at most `lifetime_s`."""

    def __init__(self, store: Any, lifetime_s: float) -> None:
        self.store = store
        self.deadline = time.monotonic() + lifetime_s
        self.answered = 0
        self.thread = threading.Thread(target=self._serve, name="preflight-clock", daemon=True)
        self.stopped = threading.Event()

    def stop(self) -> None:
        """Stop answering and wait for the thread (at most one wait slice): a thread blocked in a store
        call while the interpreter exits aborts the process (std::terminate)."""
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5 * SLICE_S)

    def _serve(self) -> None:
        ticket = 1
        while time.monotonic() < self.deadline and not self.stopped.is_set():
            # Polled, not a store wait: a c10d wait that times out logs a warning each time, and a
            # thread blocked in one at interpreter exit aborts the process. A poll every 2-20 ms
            # adds at most that much to a round trip (its error bar), and costs rank 0 little.
            pinged = wait_until(lambda t=ticket: present(self.store, clock_ping_key(t)), SLICE_S,
                                stop_if=self.stopped.is_set, first_poll_s=0.002, max_poll_s=0.02)
            if not pinged:  # a later ticket waiting means this one's pinger died between its ticket and ping
                if present(self.store, clock_ping_key(ticket + 1)):
                    ticket += 1
                continue
            write_value(self.store, clock_pong_key(ticket), ClockStamp(time.time()))
            self.answered += 1
            ticket += 1


def serve(world: World, lifetime_s: float) -> ClockServer | None:
    """On rank 0 (hosting the store): start answering; None when no second connection forms."""
    store = side_client(world, SIDE_JOIN_S)
    if store is None:
        return None
    server = ClockServer(store, lifetime_s)
    server.thread.start()
    write_value(store, CLOCK_OPEN_KEY, ClockStamp(time.time()))
    return server


def measure(store: Any, into: ClockFacts, samples: int = SAMPLES) -> None:
    """On a measuring rank: fill `into` with the best sample's offset and error (or why not)."""
    if Board(store).wait(CLOCK_OPEN_KEY, 0, OPEN_WAIT_S) is None:
        into.error = f"rank 0 did not answer clock pings within {OPEN_WAIT_S:g} s"
        return
    best: tuple[float, float] | None = None  # (round trip, offset)
    for _ in range(samples):
        ticket = count(store, CLOCK_TICKET_KEY)
        t1_wall, t1 = time.time(), time.monotonic()
        write_value(store, clock_ping_key(ticket), ClockStamp(t1_wall))
        arrived = wait_until(lambda t=ticket: present(store, clock_pong_key(t)), SAMPLE_TIMEOUT_S,
                             first_poll_s=0.002, max_poll_s=0.02)
        trip = time.monotonic() - t1
        answer = read_value(store, clock_pong_key(ticket), ClockStamp, 0) if arrived else None
        if not isinstance(answer, ClockStamp):
            into.error = f"no answer to clock ping {ticket} within {SAMPLE_TIMEOUT_S:g} s"
            break
        into.samples += 1
        offset = t1_wall + trip / 2 - answer.wall
        if best is None or trip < best[0]:
            best = (trip, offset)
    if best is not None:
        into.offset_s, into.error_s = best[1], best[0] / 2
        into.error = ""

