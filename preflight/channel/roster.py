"""Who is in this run's store during step 4: each rank's claim, and the beat of each rank that joined.

Claims. Every rank claims its rank number as soon as it has joined the store, with an atomic
counter (`claims/<rank>`, store.add), and leaves who it is (`claimant/<rank>/<n>`: host and
pid). The first claimant goes on; a second one (two env:// jobs without a job id on one
MASTER_PORT, or a RANK a job script exported to every task) is listed under `contested` and
stops there with one line and exit 2 (`RankTaken`). Rank 0 counts neither process as that rank
(it cannot tell which is its own job's) and names both (RANK002). Rank 0 claims rank 0 when it
hosts the store; a rank 0 that finds MASTER_PORT held by a store carrying this run's mark
(another job's rank 0) claims rank 0 there, so the job owning the port learns that a second
job shares it.

Beats. From its claim until it leaves, a rank beats under `alive/<rank>` and is listed under
`claimed` (channel/liveness.py). Rank 0's liveness watch looks at every claimed rank's beat; the
collect stops waiting for a rank it knows gone that has not published (`take_dead`: silent for
`stall_s(N)`, or it said it left): it died (killed, crashed or frozen) and is named by RUN008,
long before --timeout. A rank that never joined cannot be told from a slow one: RANK001 after
--timeout, as before.
"""

from __future__ import annotations

import os
from typing import Any

from preflight.channel.board import Board
from preflight.channel.collected import Collected, DeadRank
from preflight.channel.keys import BEAT, CLAIMANT, CLAIMED, CLAIMS, CONTESTED, append_rank, listed_ranks
from preflight.lib.errors import BadInput
from preflight.model.messages import Claimant


class RankTaken(BadInput):
    """Another process already claimed this rank in this run's store: this one is not counted."""


def claim(store: Any, rank: int, host: str) -> int:
    """Claim `rank` for this process; 1 when it is the first claimant (then it is listed as joined)."""
    board = Board(store)
    n = board.count(CLAIMS.at(rank))
    board.put(CLAIMANT.at(rank, n), Claimant(host, os.getpid()))
    if n == 1:
        board.count(BEAT.at(rank))  # the beat key exists before the rank is listed: rank 0 never waits on it
        append_rank(store, CLAIMED.key, rank)
    else:
        append_rank(store, CONTESTED.key, rank)
    return n


def claimants(store: Any, rank: int) -> list[tuple[str, int]]:
    """Every process that claimed `rank`, as (host, pid), first first (one not yet written is left out)."""
    board, found = Board(store), []
    for n in range(1, board.count(CLAIMS.at(rank), 0) + 1):
        who = board.read(CLAIMANT.at(rank, n), -1)  # a peer's value: ("?", 0) when it does not read as one
        if who is not None:
            found.append((who.host[:255], who.pid) if isinstance(who, Claimant) else ("?", 0))
    return found


def taken(store: Any, world: Any) -> RankTaken:
    """What a second claimant is told: who holds the rank, and what that means."""
    holders = claimants(store, world.rank)
    first = f"{holders[0][0]} pid {holders[0][1]}" if holders else "another process"
    return RankTaken(
        f"rank {world.rank} of run {world.run_id!r} at {world.master_addr}:{world.master_port} is already claimed "
        f"by {first}: two jobs share MASTER_ADDR:MASTER_PORT (give each its own port, PREFLIGHT_JOB_ID or "
        "--run-id), or several processes were started with the same RANK; this process is not counted as "
        f"rank {world.rank}")


def listed(store: Any, key: str, world_size: int) -> set[int]:
    """The ranks appended under `key` (CLAIMED, CONTESTED, ARRIVALS); nothing outside 0..N-1."""
    return listed_ranks(store, key, world_size)


def take_contested(store: Any, collected: Collected, world_size: int) -> None:
    """Rank 0: a rank claimed twice counts as neither claimant; its claimants are named."""
    for rank in listed(store, CONTESTED.key, world_size) - collected.duplicates.keys():
        collected.drop(rank)
        collected.duplicates[rank] = []  # who, once the collect is over (a late claimant is named too)


def name_claimants(store: Any, collected: Collected) -> None:
    """Rank 0, at the end of the collect: every claimant of every contested rank."""
    for rank in collected.duplicates:
        collected.duplicates[rank] = claimants(store, rank)


def take_dead(store: Any, collected: Collected, dead: dict[int, str], own_rank: int = 0) -> None:
    """Rank 0, during the collect: each rank the liveness watch knows gone (its beat stopped, or it
    said it left) that has not published is dead (RUN008), named with its claimant's host."""
    for rank in sorted(dead.keys() - collected.heard(own_rank)):
        holders = claimants(store, rank)
        collected.dead[rank] = DeadRank(holders[0][0] if holders else "",
                                        f"it joined the store, then {dead[rank]}, before it published its facts")

