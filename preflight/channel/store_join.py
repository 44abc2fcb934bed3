"""Joining MASTER_ADDR:MASTER_PORT without hanging on, or mixing with, something that is not ours.

A c10d TCPStore client that connects to a program that is not a store (another service on
MASTER_PORT) waits forever, whatever its timeout says (torch 2.13, measured). And a client
that reaches another job's preflight store would publish into it. So a rank joins in three
bounded steps:

1. wait until MASTER_ADDR:MASTER_PORT accepts a TCP connection (rank 0 may start later),
   within the exchange deadline;
2. create the TCPStore client in a helper thread, given HANDSHAKE_S to answer as a store;
3. unless a launcher agent hosts the store, read the owner mark rank 0 set when it hosted
   the store (run id, world size) and refuse a store marked by another run.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from typing import Any

from preflight.channel import run_auth
from preflight.channel.board import BadValue, Board
from preflight.channel.keys import OWNER
from preflight.lib.deadline import call_with_deadline
from preflight.lib.waiting import wait_until
from preflight.model import World
from preflight.model.messages import OwnerMark

# The least a store gets to answer (a third of the join's deadline when that is more). More than glibc's
# resolver timeout x attempts (5 s x 2): a c10d store that looks its clients up in a slow or lossy DNS
# answers a burst of joins only after the lookups time out. Measured in the lab: 24 clients joining one
# store at once, 14-17 of them answered at 5.01 s (RES_OPTIONS=timeout:1 made it 1.0 s; 64 at once,
# 10 s); with a 5 s bound those joins were "another program holds MASTER_PORT" (PORT004).
HANDSHAKE_S = 15.0


class ForeignStore(Exception):
    """MASTER_ADDR:MASTER_PORT answers, but not as this run's store."""


def owner_mark(world: World) -> OwnerMark:
    """What rank 0 writes into the store it hosts, so clients can tell it is theirs.

    With a run secret (channel/run_auth.py) the mark carries its proof, so a rank of another
    job with another secret refuses the store even when run id and world size agree."""
    secret = run_auth.run_secret()
    proof = run_auth.proof(secret, OWNER.key, world.run_id, str(world.world_size)) if secret else ""
    return OwnerMark(world.run_id, world.world_size, world.host, os.getpid(), proof)


def mark_store(store: Any, world: World) -> OwnerMark:
    """Rank 0, right after hosting: claim the store for this run; the mark it wrote."""
    mark = owner_mark(world)
    Board(store).put(OWNER.key, mark)
    return mark


def read_mark(store: Any) -> OwnerMark | BadValue | None:
    """The owner mark of a store (its root, not a run's prefix): None when absent, BadValue when not one."""
    return Board(store).read(OWNER.key, -1)


def wait_for_listener(addr: str, port: int, timeout_s: float) -> float:
    """Seconds until addr:port accepted a TCP connection; raises OSError with the last error at the deadline."""
    started = time.monotonic()
    deadline = started + timeout_s
    last: Exception | None = None

    def accepted() -> bool:
        nonlocal last
        try:
            with socket.create_connection((addr, port), timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                return True
        except OSError as exc:
            last = exc
            return False

    if wait_until(accepted, timeout_s, first_poll_s=0.05):
        return time.monotonic() - started
    reason = f"{type(last).__name__}: {last}" if last else "no attempt finished"
    raise OSError(f"{addr}:{port} did not accept a connection within {timeout_s:g}s ({reason})")


def join_store(world: World, timeout_s: float, least_handshake_s: float = HANDSHAKE_S) -> Any:
    """A TCPStore client of this run's store; OSError when unreachable, ForeignStore when not ours.

    `timeout_s` bounds the wait for the port to open; once it has, the store gets its handshake
    (at least `least_handshake_s`) in full, however long the port took."""
    from torch.distributed import TCPStore

    addr, port = world.master_addr, world.master_port
    spent = wait_for_listener(addr, port, timeout_s)
    # A loaded store (thousands of joins, a slow reverse DNS lookup in the c10d server) answers
    # late; a fixed 5 s made those a false "another program holds MASTER_PORT" (PORT004). Nor is
    # the handshake cut by the time rank 0 took to open its port: a follower that waited 4 of its
    # 5 s for a rank 0 still importing torch gave that store 1 s, and called it foreign (CI, a
    # loaded machine: test_rank_0_gone.py).
    handshake = max(least_handshake_s, timeout_s / 3)
    client_timeout = max(timeout_s - spent, handshake)
    outcome = call_with_deadline(
        lambda: TCPStore(addr, port, None, False, timedelta(seconds=client_timeout)), handshake
    )
    if outcome.timed_out:
        raise ForeignStore(
            f"{addr}:{port} accepts connections but did not answer as a c10d store within {handshake:g}s: "
            "another program holds MASTER_PORT"
        )
    if outcome.error is not None:
        raise outcome.error
    store = outcome.value
    if not world.use_agent_store:
        _verify_owner(store, world, handshake)
    return store


def run_prefix(world: World) -> str:
    """The prefix of every key of this run in the store (a stale run's keys are never read)."""
    return f"preflight/{world.run_id}"


def side_client(world: World, timeout_s: float) -> Any:
    """A second client of this run's (already formed) store, under the run's prefix; None when it cannot join.

    A c10d client has one connection and serializes its calls: while one thread blocks in a
    store wait (a process group forming, waiting for a rank that died), another thread's call
    on the same client waits too. A heartbeat needs its own connection."""
    from torch.distributed import PrefixStore, TCPStore

    outcome = call_with_deadline(
        lambda: TCPStore(world.master_addr, world.master_port, None, False, timedelta(seconds=timeout_s)), timeout_s)
    return PrefixStore(run_prefix(world), outcome.value) if outcome.ok else None


def own_client(store: Any, timeout_s: float) -> Any:
    """A client of `store` on a connection of its own (c10d's `clone`: same server, same key prefix),
    for one thread that may block in it; None when none can be made within timeout_s.

    A c10d client serializes its calls under one lock, and a blocking call holds that lock for as
    long as it waits: a store wait inside torch's group creation, waiting for a rank that never
    comes, held it for the process group's timeout (30 min for a DeviceMesh's groups), and every
    other thread's call on that client waited behind it. The main thread among them cannot run a
    signal handler while it waits inside C++: rank 0 ignored SIGTERM (issue 47). So a thread that
    may block gets a client of its own, and the run's shared client gets only calls that answer
    at once (docs/architecture.md, "Store clients")."""
    outcome = call_with_deadline(store.clone, timeout_s)
    return outcome.value if outcome.ok else None


def _verify_owner(store: Any, world: World, timeout_s: float) -> None:
    key = OWNER.key
    if not wait_until(lambda: Board(store).has(key), timeout_s):
        raise ForeignStore(
            f"the store at {world.master_addr}:{world.master_port} carries no preflight owner mark after "
            f"{timeout_s:g}s: it is not this run's rank 0 (another job's rendezvous on the same port?)"
        )
    mark, secret = read_mark(store), run_auth.run_secret()
    where = f"the store at {world.master_addr}:{world.master_port}"
    if not isinstance(mark, OwnerMark):  # a foreign client wrote it (the mark is rank 0's only)
        why = mark.why if isinstance(mark, BadValue) else "it went away"
        forged = f"refused as forged (no valid proof of {run_auth.SECRET_VAR}): " if secret else ""
        raise ForeignStore(f"{where} is not this run's: {forged}its owner mark under {key!r} is not one ({why})")
    if bool(secret) != bool(mark.proof) or (
            secret and not run_auth.valid(secret, mark.proof, key, world.run_id, str(world.world_size))):
        why = ("differs from this rank's" if secret and mark.proof else
               "is set and this rank's is not" if mark.proof else "is unset and this rank's is set")
        raise ForeignStore(
            f"{where} is not this run's: its owner's "
            f"{run_auth.SECRET_VAR} {why} (another job on the same port, or the secret set on some ranks only)"
        )
    if mark.run_id != world.run_id or mark.world_size != world.world_size:
        raise ForeignStore(
            f"{where} belongs to another run "
            f"(run id {mark.run_id[:200]!r}, world size {mark.world_size}, hosted by pid {mark.pid} "
            f"on {mark.host[:255]}), not this one (run id {world.run_id!r}, world size {world.world_size})"
        )
