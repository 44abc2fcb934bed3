"""Localization that converges at scale: adaptive group testing among suspect hosts.

The pairwise round robin (pairwise.py) costs n-1 rounds over n suspects. When many hosts are
suspect, split them instead: a pool of suspects is tested together with a known-good host (one
sub-communicator per pool, a collective over the pool plus its good host, bounded by its
slowest member); a pool that stays fast clears all its hosts at once, a slow one is split in
halves and both halves are tested in the next round, down to single hosts. Every pool of a
round runs at once, each with its own known-good host, so a round holds at most as many
pools as there are known-good hosts; the rest wait for the next round.

Noise (a scheduler stall, a busy link) can make a fast pool look slow or hide a slow one
behind a lucky iteration, so nothing is named on one measurement: a single host that tests
slow is tested again against another known-good host and is named only when slow both times
(confirm before blaming), and a slow pool whose halves both test fast is tested once more
before it is cleared. With k bad hosts among N this names them in O(k log N) tests and, with
enough known-good hosts, O(log N) rounds (benchmarks/localization_sim.py measures both).

`locate` is pure: it calls `test(pools)` once per round with the pools to measure at once and
gets back, per pool, whether it was slow. The probes give it a test that runs collectives over
sub-communicators; the simulator gives it a model of a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from msgspec import Struct, field

H = TypeVar("H", bound=Hashable)

MAX_ROUNDS = 10_000  # a does-not-loop bound: far above 2 k log2 N for any real job


class Located(Struct, Generic[H]):
    """What group testing found: the bad hosts, and what it cost."""

    bad: list[H]
    rounds: int
    tests: int
    cleared: int  # suspects found healthy
    history: list[list[tuple[int, bool]]] = field(default_factory=list)  # per round: (pool size, slow)


def _halves(pool: list[H]) -> list[list[H]]:
    mid = len(pool) // 2
    return [pool[:mid], pool[mid:]]


class _Item(Struct, Generic[H]):
    """A pool waiting to be measured: a test, a retest of a slow pool whose halves were fast, or a confirmation."""

    pool: list[H]
    kind: str = "test"  # test | retest | confirm
    parent: _Item[H] | None = None
    fast_halves: int = 0  # of this pool's two halves, how many tested fast


def locate(suspects: Sequence[H], good_count: int, test: Callable[[list[list[H]]], list[bool]],
           *, known_slow: bool = True) -> Located[H]:
    """Name the bad hosts among `suspects` by adaptive group testing (see the module docstring).

    good_count: known-good hosts available as partners, so pools that can run in one round.
    known_slow: the suspects as a whole are already known to be slow (a confirmed straggler),
    so the first round splits them instead of testing them all together.
    """
    if good_count < 1:
        raise ValueError("group testing needs at least one known-good host")
    pool = list(suspects)
    if not pool:
        return Located([], 0, 0, 0)
    root = _Item(pool)  # known slow: its halves both testing fast sends it to a retest
    queue: list[_Item[H]] = [_Item(h, parent=root) for h in _halves(pool)] if known_slow and len(pool) > 1 \
        else [root]
    bad: list[H] = []
    cleared = rounds = tests = 0
    history: list[list[tuple[int, bool]]] = []
    while queue and rounds < MAX_ROUNDS:
        batch, queue = queue[:good_count], queue[good_count:]
        outcomes = test([item.pool for item in batch])
        rounds += 1
        tests += len(batch)
        history.append([(len(item.pool), slow) for item, slow in zip(batch, outcomes)])
        for item, slow in zip(batch, outcomes):
            if item.kind == "confirm":
                if slow:
                    bad.append(item.pool[0])
                else:
                    cleared += 1
            elif slow and len(item.pool) == 1:
                queue.append(_Item(item.pool, "confirm"))
            elif slow:
                # A retested pool is split once more without another retest: noise is not chased forever.
                parent = None if item.kind == "retest" else item
                queue += [_Item(half, parent=parent) for half in _halves(item.pool)]
            elif item.parent is None:
                cleared += len(item.pool)
            else:
                cleared += len(item.pool)
                item.parent.fast_halves += 1
                if item.parent.fast_halves == 2:  # a slow pool with two fast halves: measure it again
                    cleared -= len(item.parent.pool)
                    queue.append(_Item(item.parent.pool, "retest"))
    return Located(sorted(bad, key=str), rounds, tests, cleared, history)
