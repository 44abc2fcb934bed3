"""Every key family of a run's store, in one place, and the rank lists some of them hold.

All keys live under the run's prefix (`preflight/<run id>/`, store_join.run_prefix); the
probes' keys under a further `probe/` (probes/liveness.PROBE_PREFIX), the second measuring
pass's under `probe/second/`. Each family carries one message type (model/messages.py), read
through board.py; a counter (`store.add`) or a rank list (below) carries plain ASCII.
"""

from __future__ import annotations

from typing import Any

# -- step 4, the exchange (channel/exchange.py, roster.py, store_join.py) -----------------
OWNER_KEY = "owner"  # the owner mark rank 0 writes into the store it hosts
CLAIMED_KEY = "claimed"  # rank list: every rank whose first claimant is in
CONTESTED_KEY = "contested"  # rank list: once per second (third, ...) claimant
ARRIVALS_KEY = "arrivals"  # rank list: every rank that published its payload
ACKED_KEY = "acked"  # rank list: every rank that has read the verdict


def payload_key(rank: int) -> str:
    """A rank's payload (wire.py)."""
    return f"rank/{rank}"


# -- step 4, clock offsets (channel/clock.py) ------------------------------------------------
CLOCK_OPEN_KEY = "clock/open"  # ClockStamp: rank 0 answers clock pings
CLOCK_TICKET_KEY = "clock/ticket"  # counter: each ping's number


def clock_ping_key(ticket: int) -> str:
    """ClockStamp: a measuring rank's ping number `ticket`."""
    return f"clock/ping/{ticket}"


def clock_pong_key(ticket: int) -> str:
    """ClockStamp: rank 0's wall time, answering ping `ticket`."""
    return f"clock/pong/{ticket}"


# -- liveness (channel/liveness.py) ---------------------------------------------------------
HEARTBEAT_KEY = "heartbeat"  # counter: rank 0's beat
DEAD_KEY = "dead"  # DeadRanks: the ranks rank 0 found dead during the probes


def beat_key(rank: int) -> str:
    """The counter a rank beats under, from its claim until it leaves."""
    return f"alive/{rank}"


# -- step 8, the probes (probes/), under probe/ ----------------------------------------------
def result_key(rank: int) -> str:
    """ProbeReport: a rank's measurements and where its probing ended."""
    return f"res/{rank}"


def position_key(rank: int) -> str:
    """int: the last step a rank started."""
    return f"pos/{rank}"


def bound_key(rank: int) -> str:
    """BoundRecord: the backend and device a rank's session bound."""
    return f"dev/{rank}"


def device_key(rank: int) -> str:
    """DeviceReport: what a rank measured on its own device (probes/device_store.py)."""
    return f"device/{rank}"


def setup_key(rank: int) -> str:
    """SetupStage: the setup stage a rank has reached."""
    return f"setup/{rank}"


def no_gpu_key(rank: int) -> str:
    """NoGpu: why a rank cannot use a GPU (backend vote)."""
    return f"no_gpu/{rank}"


GPU_RANKS_KEY = "gpu_ranks"  # counter: ranks that can use a GPU
BACKEND_VOTES_KEY = "backend_votes"  # counter: ranks that voted
AGAIN_KEY = "again"  # RemeasureSteps: the steps rank 0 has measured a second time (confirm.py)
CONFIRM_KEY = "confirm"  # ConfirmPairs: the pairs measured one at a time (confirm.py)
LOCALIZE_KEY = "localize"  # LocalizePlan: what localization follows (localize.py)


def pair_key(rank: int) -> str:
    """PairTimes: a rank's round-robin times per peer (localize.py)."""
    return f"pair/{rank}"


def confirm_pair_key(rank: int) -> str:
    """PairSamples: a rank's samples of the confirming one-pair-at-a-time pass."""
    return f"cpair/{rank}"


GROUP_TEST_PREFIX = "gt"  # group testing's rounds (hosttest.py)


def round_key(index: int) -> str:
    """RoundPlan: group testing's round `index` (or done)."""
    return f"{GROUP_TEST_PREFIX}/{index}"


def round_times_key(index: int, rank: int) -> str:
    """RoundTimes: a member's per-iteration seconds in round `index`."""
    return f"{GROUP_TEST_PREFIX}/{index}/t/{rank}"


# -- rank lists ------------------------------------------------------------------------------
def append_rank(store: Any, key: str, rank: int) -> None:
    """Add `rank` to the rank list under `key` ("r," appended: atomic, any number of writers)."""
    store.append(key, f"{rank},")


def listed_ranks(store: Any, key: str, world_size: int) -> set[int]:
    """The ranks appended under `key`; nothing outside 0..N-1 (any client can append: garbage is ignored)."""
    if not store.check([key]):
        return set()
    ranks = {int(r) for r in bytes(store.get(key)).decode(errors="replace").split(",")
             if r.isascii() and r.isdigit() and len(r) <= 18}
    return {r for r in ranks if r < world_size}
