"""The reachability step: can each host's chosen address take TCP from the other hosts?

Bounded fan-out, never N²: one listener per host (the host's first rank to claim it, normally
local rank 0), on the chosen interface's address and an ephemeral port, published through the
store. Rank 0, once it has collected the ranks' reports, publishes the roster of listeners;
each host then connects to its ring neighbours and `k` random peers (a plan every host
computes alike, seeded by the run id), in parallel, each connection under its own deadline,
from its chosen address, and publishes what happened. Rank 0 gathers the results, which the
cross checks (checks/reachability.py) read as `ctx.reachability`. Other ranks on a host share
its result.

Keys, under the run's store prefix (rows of channel/keys.py): `reach/claim/<host>`,
`reach/listener/<host>`, `reach/roster`, `reach/result/<host>`, counter `reach/done`. Every
wait has a deadline.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from preflight.channel import keys
from preflight.channel.board import BadValue, Board
from preflight.channel.keys import Key
from preflight.lib.waiting import wait_until
from preflight.model import RankFacts
from preflight.model.codec import from_builtins, to_builtins
from preflight.model.messages import ReachResult
from preflight.model.reachability import ReachabilityOutcome, ReachListener
from preflight.options import RunOptions
from preflight.registry import Tags

RANDOM_PEERS = 2  # k: random peers per host, besides the two ring neighbours


def plan_probes(count: int, k: int, seed: str) -> list[list[int]]:
    """Targets of every host index 0..count-1: ring neighbours plus k random peers.

    Each host's targets depend only on (count, k, seed, its index), so each host computes its
    own plan in O(k). Every host is probed at least by its ring neighbours; total connections
    are at most count * (k + 2).
    """
    return [targets_of(index, count, k, seed) for index in range(count)]


def targets_of(index: int, count: int, k: int, seed: str) -> list[int]:
    """The hosts that host `index` connects to (see plan_probes)."""
    if count < 2:
        return []
    targets = [(index + 1) % count]
    if (index - 1) % count not in targets:
        targets.append((index - 1) % count)
    rng = random.Random(f"{seed}/{index}")
    others = count - 1 - len(targets)
    wanted = min(k, others)
    while wanted > 0:
        candidate = rng.randrange(count)
        if candidate != index and candidate not in targets:
            targets.append(candidate)
            wanted -= 1
    return targets


@dataclass
class Listener:
    """This host's listener: accepts and closes connections until closed."""

    address: str
    interface: str
    sock: socket.socket | None = None
    port: int = 0
    error: str = ""
    _thread: threading.Thread | None = field(default=None, repr=False)

    def open(self) -> None:
        """Bind to the chosen interface's address on an ephemeral port."""
        if not self.address:
            self.error = "no usable interface chosen on this host"
            return
        try:
            family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
            self.sock = socket.socket(family, socket.SOCK_STREAM)
            self.sock.bind((self.address, 0))
            self.sock.listen(1024)
            self.sock.settimeout(0.2)
            self.port = self.sock.getsockname()[1]
        except OSError as exc:
            self.error = f"cannot listen on {self.address} ({self.interface or '?'}): {exc}"
            self.close()
            return
        self._thread = threading.Thread(target=self._accept, daemon=True, name="reachability-listener")
        self._thread.start()

    def _accept(self) -> None:
        while self.sock is not None:
            try:
                conn, _ = self.sock.accept()
                conn.close()
            except (TimeoutError, OSError):
                continue

    def close(self) -> None:
        """Stop listening."""
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()


def probe(source: str, target: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """One TCP connection from our chosen address to a peer's listener."""
    result = {"target": target["host"], "address": target.get("address", ""), "interface": target.get("interface", ""),
              "ok": False, "error": "", "time_s": 0.0}
    if target.get("error") or not target.get("port"):
        result["error"] = f"no listener: {target.get('error') or 'none published'}"
        result["skipped"] = True
        return result
    started = time.perf_counter()
    family = socket.AF_INET6 if ":" in target["address"] else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            if source and (":" in source) == (family == socket.AF_INET6):
                sock.bind((source, 0))  # over our chosen interface, as the job's sockets will be
            sock.connect((target["address"], int(target["port"])))
        result["ok"] = True
    except TimeoutError:
        result["error"] = f"timed out after {timeout_s:g}s"
    except OSError as exc:
        result["error"] = exc.strerror or str(exc)
    result["time_s"] = round(time.perf_counter() - started, 4)
    return result


class Reachability:
    """One rank's part of the reachability step; one rank per host (the first to claim it) does work."""

    def __init__(self, store: Any, facts: RankFacts, seed: str, connect_timeout_s: float,
                 k: int = RANDOM_PEERS) -> None:
        self.store, self.facts, self.seed, self.k = store, facts, seed, k
        self.board = Board(store) if store is not None else None
        self.connect_timeout_s = connect_timeout_s
        chosen = facts.network.chosen_interface
        self.listener = Listener(chosen.address, chosen.name) if chosen else Listener("", "")
        self.active = False  # whether this rank speaks for its host (see start)

    def start(self) -> None:
        """Claim this host for this rank if no other rank of it did; then open its listener and publish it.

        The first rank of a host to claim it works for the host, whatever LOCAL_RANK says (a
        launcher's local ranks can be wrong, which the layout checks report separately).
        """
        if self.store is None:
            return
        assert self.board is not None
        try:
            self.active = self.board.count(keys.REACH_CLAIM.at(self.facts.host)) == 1
            if not self.active:
                return
            self.listener.open()
            self.board.put(keys.REACH_LISTENER.at(self.facts.host),
                           ReachListener(self.facts.host, self.listener.address, self.listener.interface,
                                         self.listener.port or 0, self.listener.error, rank=self.facts.rank))
        except (RuntimeError, OSError):
            self.lost()

    def lost(self) -> None:
        """The store dropped this rank's connection (rank 0 gone; or a foreign client's `[1]` under a
        counter, which c10d's server answers by closing the connection): the step goes inert here, and
        the go / verdict wait that follows reports the lost store, never a traceback."""
        self.active, self.store, self.board = False, None, None
        self.listener.close()

    def publish_roster(self, hosts: list[str], timeout_s: float) -> list[dict[str, Any]]:
        """Rank 0: wait for the listeners of the hosts that reported, then publish the roster."""
        roster: dict[str, Any] = {}
        listeners = {keys.REACH_LISTENER.at(host): host for host in hosts}

        def all_listed(final: bool = False) -> bool:
            pending = [key for key, host in listeners.items() if host not in roster]
            for key, value in fetch_typed(self.board, pending, final).items():
                roster[listeners[key]] = value if value["host"] == listeners[key] else {
                    **value, "host": listeners[key], "port": 0, "error": "published a listener for another host"}
            return len(roster) == len(hosts)

        if not wait_until(all_listed, timeout_s):
            all_listed(final=True)  # the stragglers, key by key, once
        for host in hosts:
            roster.setdefault(host, {"host": host, "address": "", "interface": "", "port": 0,
                                     "error": "published no listener in time"})
        ordered = [roster[h] for h in sorted(roster)]
        assert self.board is not None
        self.board.put(keys.REACH_ROSTER.key, [ReachListener(**entry) for entry in ordered])
        return ordered

    def probe_peers(self, timeout_s: float) -> None:
        """Wait for the roster, probe this host's targets in parallel, publish the result."""
        try:
            self._probe_peers(timeout_s)
        except (RuntimeError, OSError):
            self.lost()

    def _probe_peers(self, timeout_s: float) -> None:
        if not self.active:
            return
        told = self._wait_roster(timeout_s)
        if told is None:
            return
        roster = [to_builtins(entry) for entry in told]
        hosts = [entry["host"] for entry in roster]
        if self.facts.host not in hosts:
            return
        index = hosts.index(self.facts.host)
        targets = [roster[i] for i in targets_of(index, len(roster), self.k, self.seed)]
        with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
            results = list(pool.map(lambda t: probe(self.listener.address, t, self.connect_timeout_s), targets))
        record = {"host": self.facts.host, "interface": self.listener.interface, "address": self.listener.address,
                  "results": results}
        assert self.board is not None
        self.board.put(keys.REACH_RESULT.at(self.facts.host), from_builtins(record, ReachResult))
        self.board.count(keys.REACH_DONE.key)
        self._roster_size = len(roster)

    def finish(self, timeout_s: float) -> None:
        """Keep listening until every host has probed (or the deadline), then close."""
        if not self.active:
            return
        size = getattr(self, "_roster_size", 0)
        try:
            board = self.board
            if size and board is not None:
                wait_until(lambda: board.count(keys.REACH_DONE.key, 0) >= size, timeout_s)
        except (RuntimeError, OSError):
            pass  # the store is gone: nothing more to wait for
        finally:
            self.listener.close()

    def collect(self, roster: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        """Rank 0: every host's published result, and which hosts published none in time."""
        results: dict[str, Any] = {}
        published = {keys.REACH_RESULT.at(entry["host"]): entry["host"] for entry in roster}

        def all_reported(final: bool = False) -> bool:
            pending = [key for key, host in published.items() if host not in results]
            for key, value in fetch_typed(self.board, pending, final).items():
                results[published[key]] = value["results"]
            return len(results) == len(roster)

        if not wait_until(all_reported, timeout_s):
            all_reported(final=True)
        return {
            "roster": roster,
            "results": results,
            "missing": sorted(e["host"] for e in roster if e["host"] not in results),
            "k": self.k,
            "connect_timeout_s": self.connect_timeout_s,
        }

    def _wait_roster(self, timeout_s: float) -> list[ReachListener] | None:
        """The roster rank 0 published; None at the deadline, once the store is gone, or when it does not decode."""
        gone = object()
        assert self.board is not None
        board = self.board

        def published() -> Any:
            try:
                value = board.read(keys.REACH_ROSTER.key, 0)
            except Exception:
                return gone  # the store went away (rank 0 exited): nothing more to do
            # A roster, even the empty one rank 0 publishes when it leads no reachability (`release`), is
            # the answer: boxed, because wait_until waits for a true value.
            return (value,) if isinstance(value, list) else value

        value = wait_until(published, timeout_s)
        return value[0] if isinstance(value, tuple) else None


def fetch_typed(board: Board | None, wanted: list[Key[Any]], final: bool = False) -> dict[str, Any]:
    """Each of `wanted` (keys of one row) that is in the store, decoded as its row's type (as plain dicts for
    the step's outcome):
    rank 0's batched read of per-host keys (board.fetch_raw: two store calls per 1,024 hosts per
    look). A chunk with a key still missing waits until the final look at the deadline, which
    reads the stragglers key by key once. A value that does not decode stands as a record of
    that host with the reason in `error` (the host could not be probed: NET009), never an exception."""
    if board is None:
        return {}
    found: dict[str, Any] = {}
    for key, value in zip(wanted, board.fetch(wanted, [-1] * len(wanted), partial=final), strict=True):
        if isinstance(value, BadValue) and key.family is keys.REACH_RESULT:
            continue  # as if none came: the host could not be probed (NET009)
        if isinstance(value, BadValue):
            host = key.rsplit("/", 1)[-1]
            found[key] = {"host": host, "address": "", "interface": "", "port": 0, "results": [],
                          "error": f"published a value that could not be read ({value.why[:120]})"}
        elif value is not None:
            found[key] = to_builtins(value)
    return found


# One TCP connect's deadline (at most --check-timeout), and each wait for peers.
REACH_CONNECT_S = 2.0
REACH_WAIT_S = 5.0


def reachability_for(store: Any, facts: RankFacts, options: RunOptions) -> Reachability:
    """This rank's part in the step; inert without a store or when network checks are off."""
    wanted = Tags.NETWORK not in options.skip and (not options.only or Tags.NETWORK in options.only)
    return Reachability(store if wanted else None, facts, seed=facts.world.run_id,
                        connect_timeout_s=min(REACH_CONNECT_S, options.timeouts.check_s))


def take_part(reach: Reachability, timeout_s: float) -> None:
    """A non-zero rank (if it speaks for its host): probe the peers the roster assigns, then keep listening.

    The roster comes after rank 0's collect, so the wait for it is the collect's deadline and more.
    """
    reach.probe_peers(timeout_s + REACH_WAIT_S)
    reach.finish(REACH_WAIT_S + reach.connect_timeout_s)


def release(reach: Reachability, store: Any) -> None:
    """Rank 0 leads no reachability this run (the ranks disagree on their options, RUN011, so a rank may have
    network checks on where rank 0 has them off): its listener closes, and an empty roster ends every
    rank's wait for one at once."""
    reach.finish(0.0)
    if store is None:
        return
    try:
        Board(store).put(keys.REACH_ROSTER.key, [])
    except (RuntimeError, OSError):  # the store is gone: the followers' waits end at their deadline
        pass


def lead(reach: Reachability, hosts: list[str]) -> ReachabilityOutcome | None:
    """Rank 0: publish the roster of listeners, probe its own peers, return every host's result."""
    if reach.store is None:
        return None
    roster = reach.publish_roster(hosts, REACH_WAIT_S)
    reach.probe_peers(REACH_WAIT_S)
    outcome = reach.collect(roster, REACH_WAIT_S + reach.connect_timeout_s)
    reach.finish(0.0)
    return ReachabilityOutcome.from_collected(**outcome)
