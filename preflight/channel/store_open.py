"""Forming the channel: rank 0 hosts the run's TCPStore, or a rank joins it (or the launcher
agent's), and the ranks agree through it on the run's identity and its secrets' key.

Every agreement is first writer wins (`Board.agree`: compare_set with an empty expected value),
so no rank waits for another and all end with the same value. A store that cannot form is not an
exception here: `FormedStore.error` says why, in one line, and the run falls back on --out-dir
(channel/exchange.py).
"""

from __future__ import annotations

import secrets
import socket
from datetime import timedelta
from typing import Any

from msgspec import Struct

from preflight.channel import keys, roster
from preflight.channel.board import Board
from preflight.channel.store_join import ForeignStore, join_store, mark_store
from preflight.lib.errors import one_line
from preflight.model import World
from preflight.model.messages import OwnerMark

HELD_PORT_JOIN_S = 2.0  # a rank 0 that could not host looks this long for another job's store on its port


class FormedStore(Struct):
    """What hosting or joining gave: the run's store under its prefix, or why there is none."""

    store: Any = None  # a PrefixStore under the run's prefix; None when the store could not form
    root: Any = None  # rank 0 hosting: the store itself, where its owner mark lives ...
    mark: OwnerMark | None = None  # ... and the mark it wrote there
    nonce: str = ""  # the run's identity, agreed through the store
    error: str = ""  # why the store could not form
    foreign: bool = False  # MASTER_PORT answered, but not as this run's store


def host_or_join(world: World, prefix: str, timeout_s: float, has_fallback: bool) -> FormedStore:
    """Rank 0 (unless a launcher agent hosts the store) hosts it at MASTER_ADDR:MASTER_PORT; any
    other rank joins it, bounded (channel/store_join.py). `has_fallback`: --out-dir was given, so
    a follower gives up on the store early enough for the directory to reach rank 0 in time."""
    from torch.distributed import PrefixStore, TCPStore

    hosting = world.rank == 0 and not world.use_agent_store
    formed = FormedStore()
    try:
        if hosting:
            # torch retries an unresolvable MASTER_ADDR for ~3x the timeout before it gives up.
            socket.getaddrinfo(world.master_addr, world.master_port, type=socket.SOCK_STREAM)
            store = TCPStore(world.master_addr, world.master_port, None, True, timedelta(seconds=timeout_s),
                             wait_for_workers=False)
            # Port 0 (single process) means "any free port": record the one we got.
            world.master_port = store.port
            formed.root, formed.mark = store, mark_store(store, world)  # clients refuse another run's mark
        else:
            # Bounded: a bare TCPStore client hangs on a listener that is not a store.
            store = join_store(world, timeout_s / 3 if has_fallback else timeout_s)
            store.set_timeout(timedelta(seconds=timeout_s))
        formed.store = PrefixStore(prefix, store)
        formed.nonce = agree_nonce(formed.store)
    except Exception as exc:  # DistNetworkError, DistStoreError, RuntimeError: all mean "no store"
        formed.store, formed.error = None, error_line(exc)
        formed.foreign = isinstance(exc, ForeignStore)
        if hosting and "EADDRINUSE" in formed.error:
            formed.error += _claim_in_held_store(world, prefix)
        if not has_fallback:
            formed.error += " (no --out-dir fallback was given)"
    return formed


def _claim_in_held_store(world: World, prefix: str) -> str:
    """Rank 0 could not host: where a store with this run's mark holds the port (another job's
    rank 0), claim rank 0 in it, so that job's report says two jobs share the port."""
    from torch.distributed import PrefixStore

    try:
        held = PrefixStore(prefix, join_store(world, HELD_PORT_JOIN_S, HELD_PORT_JOIN_S))
        roster.claim(held, 0, world.host)
        owner = roster.claimants(held, 0)[:1]
    except Exception:  # not a store, another run's, or gone: nothing to tell
        return ""
    who = f" (pid {owner[0][1]} on {owner[0][0]})" if owner else ""
    return (f"; a preflight store of this run id and world size answers there{who}: another job's rank 0 "
            "hosts it, and this job's ranks may have joined it (it was told rank 0 is claimed twice)")


def agree_on_key(store: Any) -> bytes | None:
    """The secrets' digest key every rank of this run gets from the store (first writer wins), or None
    (lib/secrets.py seals each secret with it)."""
    if store is None:
        return None
    try:
        agreed = Board(store).agree(keys.SECRET_KEY.key, secrets.token_hex(32))
    except Exception:  # a store that went away: no key, secrets stay bare
        return None
    return agreed or None


def agree_nonce(store: Any) -> str:
    """This run's random identity: the first rank to ask sets it, every other rank reads that one.

    Only its letters and digits count (any client can set it first; it names --out-dir files)."""
    agreed = Board(store).agree(keys.NONCE.key, secrets.token_hex(8)).decode(errors="replace")
    return "".join(c for c in agreed if c.isascii() and c.isalnum())[:64]


def error_line(exc: BaseException) -> str:
    """A store failure as the one line a report and a follower's exit say: its type and message."""
    return f"{type(exc).__name__}: {one_line(exc, 400)}"
