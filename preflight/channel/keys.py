"""The one table of the run's store: every key family a typed row.

Each row (`Family`) says what a family's keys look like (`pattern`), what each value is (its
message type in model/, decoded by the one codec; or `Counter` / `RankList` / `Agreed` for the
few values the store itself keeps, `Wire` for a rank's payload), who writes it and who reads it. Code
names a key by its row (`VERDICT.key`, `RESULT.at(rank)`); a `Key` is the key's text carrying
its row, so channel/board.py reads every value as its row's type and nothing else: no key
string and no message type travel separately (tests/test_architecture.py: no key string
outside this module). The nccl-tests idea, each collective one table row, applied to messages.

All keys live under the run's prefix (`preflight/<run id>/`, store_join.run_prefix), except the
owner mark (OWNER), at the store's root beside the runs' prefixes; the probes' keys under a
further `probe/` (PROBE_PREFIX), the second measuring pass's under `probe/second/`.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from msgspec import Struct

from preflight.model import IbCounters, JobReport
from preflight.model.device_probe import DeviceReport
from preflight.model.messages import (
    BoundRecord,
    Claimant,
    ConfirmPairs,
    DeadRanks,
    GoDecision,
    LocalizePlan,
    NoGpu,
    OwnerMark,
    PairSamples,
    PairTimes,
    ProbeReport,
    RankLeft,
    ReachResult,
    RemeasureSteps,
    RoundPlan,
    RoundTimes,
    SetupStage,
    Verdict,
)
from preflight.model.nccl_account import NcclAccount
from preflight.model.placement_facts import ClockStamp
from preflight.model.reachability import ReachListener
from preflight.model.storage import StoragePlan, StorageRead, StorageReads, StorageRound, StorageVisit, StorageWrote

T = TypeVar("T")


class Counter:
    """A counter the store keeps (store.add): its value is the store's int, never a peer's text."""


class RankList:
    """A rank list: "r," appended by any number of writers (append_rank); garbage is ignored."""


class Agreed:
    """Plain ASCII agreed through the store, first writer wins (compare_set): never decoded."""


class Wire:
    """A rank's payload (channel/wire.RankPayload) in wire.py's compact form: to_wire / from_wire
    (collected.py decodes it, bounded, and names the rank whose payload does not read); or one
    shared section of payloads, under its digest (sections.store_form: checked against it, then decoded)."""


SMALL = 64 * 1024  # a decision or a mark: far under this; a larger value is refused unread


class Family(Struct, Generic[T], frozen=True):
    """One key family: its keys' pattern, its values' type, who writes and who reads them."""

    pattern: str  # str.format pattern: "res/{rank}"; a fixed key has no field
    type: Any  # the message type a value decodes into, or Counter / RankList / Agreed
    writer: str
    reader: str
    max_bytes: int | None = None  # None: board.MAX_VALUE_BYTES

    @property
    def key(self) -> Key[T]:
        """The key of a family without fields (`verdict`)."""
        return Key(self.pattern, self)

    def at(self, *fields: object) -> Key[T]:
        """The key of this family for these fields, in the pattern's order (`RESULT.at(3)` is `res/3`)."""
        names, literals = _field_names(self.pattern)
        if len(names) != len(fields):
            raise TypeError(f"{self.pattern!r} takes {len(names)} field(s), not {len(fields)}")
        if len(fields) == 1:  # most families: the pattern's text around one field, joined (no format call)
            return Key(f"{literals[0]}{fields[0]}{literals[1]}", self)
        return Key(self.pattern.format(**dict(zip(names, fields, strict=True))), self)

    def texts(self, fields: Iterable[object]) -> list[str]:
        """The keys of a one-field family for these fields, as plain text: what rank 0 fetches one per
        rank (131,072 at a time) without a Key object each (board.Board.fetch_interned)."""
        names, literals = _field_names(self.pattern)
        if len(names) != 1:
            raise TypeError(f"{self.pattern!r} takes {len(names)} field(s), not 1")
        before, after = literals
        return [f"{before}{value}{after}" for value in fields]

    @property
    def head(self) -> str:
        """The pattern's text before its first field: what every key of the family starts with."""
        return self.pattern.split("{", 1)[0]


@functools.lru_cache(maxsize=256)
def _field_names(pattern: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The pattern's field names and the literal text before, between and after them, parsed once
    (rank 0 makes a key per rank per family: 131,072 at a time)."""
    parts = list(string.Formatter().parse(pattern))
    names = tuple(name for _, name, _, _ in parts if name)
    literals = tuple(text for text, _, _, _ in parts) + (("",) if parts and parts[-1][1] else ())
    return names, literals


class Key(str, Generic[T]):
    """One key's text, carrying the row it belongs to (so the store and the board read it as its type)."""

    family: Family[T]

    def __new__(cls, text: str, family: Family[T]) -> Key[T]:
        key = super().__new__(cls, text)
        key.family = family
        return key


RANK0, EVERY, FOLLOWERS, HOST_FIRST = "rank 0", "every rank", "every rank but 0", "a host's first rank"

# -- step 4, the exchange (channel/exchange.py, roster.py, store_join.py) -----------------
OWNER = Family[OwnerMark]("preflight/owner", OwnerMark, RANK0 + " (hosting)", "every joining rank", SMALL)
NONCE = Family[str]("nonce", Agreed, EVERY + " (first wins)", EVERY + "; --out-dir file names")
SECRET_KEY = Family[str]("secret-key", Agreed, EVERY + " (first wins)", "lib/secrets.py's digests")
CLAIMS = Family[int]("claims/{rank}", Counter, "a rank's claimants", RANK0 + "; a second claimant")
CLAIMANT = Family[Claimant]("claimant/{rank}/{n}", Claimant, "a rank's n-th claimant", RANK0, 4096)
CLAIMED = Family[str]("claimed", RankList, "a rank's first claimant", RANK0 + " (collect, acknowledgements)")
CONTESTED = Family[str]("contested", RankList, "a second (third, ...) claimant", RANK0)
PAYLOAD = Family[bytes]("rank/{rank}", Wire, EVERY, RANK0 + " (collected.py)")
SECTION = Family[bytes]("shared/{digest}", Wire, "the first rank that does not find it (sections.store_form)",
                       RANK0 + " (once per digest; emptied once read)")
AUTH = Family[str]("auth/{rank}", Agreed, EVERY + " with a run secret", RANK0, 4096)
ARRIVALS = Family[str]("arrivals", RankList, EVERY + " after its payload", RANK0)
GO = Family[GoDecision]("go", GoDecision, RANK0, FOLLOWERS, SMALL)
VERDICT = Family[Verdict]("verdict", Verdict, RANK0, FOLLOWERS, SMALL)
REPORT = Family[JobReport]("report", JobReport, RANK0 + " (preflight.check)", FOLLOWERS + " (preflight.check)")
ACKED = Family[str]("acked", RankList, FOLLOWERS + " after the verdict", RANK0)

# -- step 4, clock offsets (channel/clock.py) ------------------------------------------------
CLOCK_OPEN = Family[ClockStamp]("clock/open", ClockStamp, RANK0 + " (its answerer is up)", HOST_FIRST)
CLOCK_TICKET = Family[int]("clock/ticket", Counter, HOST_FIRST + " (each ping's number)", "the same")
CLOCK_PING = Family[ClockStamp]("clock/ping/{ticket}", ClockStamp, HOST_FIRST, RANK0 + " (its answerer)")
CLOCK_PONG = Family[ClockStamp]("clock/pong/{ticket}", ClockStamp, RANK0 + " (its answerer)", HOST_FIRST)

# -- liveness (channel/liveness.py) ---------------------------------------------------------
HEARTBEAT = Family[int]("heartbeat", Counter, RANK0, FOLLOWERS)
BEAT = Family[int]("alive/{rank}", Counter, "the rank, from its claim until it leaves", RANK0)
DEAD = Family[DeadRanks]("dead", DeadRanks, RANK0 + " (its watch, channel/liveness.py)", EVERY)
LEFT = Family[str]("left", RankList, "a rank leaving without the verdict", RANK0 + " (its watch)")
LEFT_WHY = Family[RankLeft]("left/{rank}", RankLeft, "a rank leaving without the verdict (a signal, its deadline)",
                            RANK0 + " (its watch)", 4096)

# -- step 5, reachability (steps/tcp_reach.py) ----------------------------------------------
REACH_CLAIM = Family[int]("reach/claim/{host}", Counter, EVERY, EVERY + " (its host's first speaks for it)")
REACH_LISTENER = Family[ReachListener]("reach/listener/{host}", ReachListener, HOST_FIRST, RANK0)
REACH_ROSTER = Family[list[ReachListener]]("reach/roster", list[ReachListener], RANK0, HOST_FIRST)
REACH_RESULT = Family[ReachResult]("reach/result/{host}", ReachResult, HOST_FIRST, RANK0)
REACH_DONE = Family[int]("reach/done", Counter, HOST_FIRST, HOST_FIRST + " (listens until all are done)")

# -- after step 8, the rechecks (steps/recheck.py) ------------------------------------------
XID_AFTER = Family[list[int]]("xid_after/{rank}", list[int], "a rank watching XIDs", RANK0)
NIC_AFTER_CLAIM = Family[int]("nic_after_claim/{host}", Counter, "a rank with RDMA counters", "the same")
NIC_AFTER = Family[list[IbCounters]]("nic_after/{host}", list[IbCounters], HOST_FIRST, RANK0)

# -- step 8, the probes (probes/), under PROBE_PREFIX -----------------------------------------
PROBE_PREFIX = "probe"  # the probes' keys, under the run's prefix (probes/liveness.probe_store)
SECOND_PREFIX = "second"  # the second measuring pass's results, under the probes' (confirm.py)
RESULT = Family[ProbeReport]("res/{rank}", ProbeReport, EVERY, RANK0 + " (collect.py)")
POSITION = Family[int]("pos/{rank}", int, EVERY + " (each step it starts)", RANK0 + " (a hang's position)")
BOUND = Family[BoundRecord]("dev/{rank}", BoundRecord, EVERY, RANK0 + "; every rank before the steps (probes/mig.py)")
# NCCL's account of a rank (probes/nccl_capture.py), without its rank, host and pid: ranks whose NCCL
# said the same send the same bytes, which rank 0 decodes once (Board.fetch_interned)
NCCL_ACCOUNT = Family[NcclAccount]("nccl/{rank}", NcclAccount, EVERY + " (before res/)", RANK0 + " (orchestrate.py)")
DEVICE = Family[DeviceReport]("device/{rank}", DeviceReport, EVERY, RANK0 + " (probes/device/store.py)")
SETUP = Family[SetupStage]("setup/{rank}", SetupStage, EVERY, RANK0 + " (setup.py)")
GPU_SEAT = Family[str]("gpu_seat/{host}/{uuid}", Agreed, "ranks bound to one GPU (first wins)",
                        "the same (probes/device/run.py: one measurement per physical GPU)")
NO_GPU = Family[NoGpu]("no_gpu/{rank}", NoGpu, "a rank without a usable GPU", EVERY + " (backend vote)")
GPU_RANKS = Family[int]("gpu_ranks", Counter, "a rank with a usable GPU", EVERY + " (backend vote)")
BACKEND_VOTES = Family[int]("backend_votes", Counter, EVERY, EVERY + " (backend vote)")
AGAIN = Family[RemeasureSteps]("again", RemeasureSteps, RANK0, FOLLOWERS + " (confirm.py)")
CONFIRM = Family[ConfirmPairs]("confirm", ConfirmPairs, RANK0, FOLLOWERS + " (confirm.py)")
CONFIRM_PAIR = Family[PairSamples]("cpair/{rank}", PairSamples, EVERY, RANK0 + " (confirm.py)")
LOCALIZE = Family[LocalizePlan]("localize", LocalizePlan, RANK0, FOLLOWERS + " (localize.py)")
PAIR = Family[PairTimes]("pair/{rank}", PairTimes, EVERY, RANK0 + " (localize.py)")
ROUND = Family[RoundPlan]("gt/{index}", RoundPlan, RANK0, "the round's members (hosttest.py)")
ROUND_TIMES = Family[RoundTimes]("gt/{index}/t/{rank}", RoundTimes, "a round's member", RANK0 + " (hosttest.py)")

# -- the storage family (steps/storage.py), under storage/ -----------------------------------
STORAGE_PLAN = Family[StoragePlan]("storage/plan", StoragePlan, RANK0, EVERY + " (its per-run directory, nonce)")
STORAGE_VISIT = Family[StorageVisit]("storage/visit/{rank}", StorageVisit, EVERY + " (what it found at PATH)", RANK0)
STORAGE_ROUND = Family[StorageRound]("storage/round/{index}", StorageRound, RANK0, EVERY + " (who writes, or done)")
STORAGE_READY = Family[int]("storage/{index}/ready", Counter, "a pass's writers", "the same (start together)")
STORAGE_WROTE = Family[StorageWrote]("storage/{index}/w/{rank}", StorageWrote, "a pass's writer", RANK0)
STORAGE_READS = Family[StorageReads]("storage/{index}/read", StorageReads, RANK0, EVERY + " (whose file it reads)")
STORAGE_READ = Family[StorageRead]("storage/{index}/r/{rank}", StorageRead, "a pass's reader", RANK0)

TABLE: tuple[Family[Any], ...] = tuple(v for v in list(globals().values()) if isinstance(v, Family))

# The names channel/liveness.py reads its keys by (rows above).
HEARTBEAT_KEY, DEAD_KEY, ACKED_KEY, CLAIMED_KEY = HEARTBEAT.key, DEAD.key, ACKED.key, CLAIMED.key
CONTESTED_KEY, ARRIVALS_KEY, LEFT_KEY = CONTESTED.key, ARRIVALS.key, LEFT.key
CLOCK_OPEN_KEY, CLOCK_TICKET_KEY = CLOCK_OPEN.key, CLOCK_TICKET.key  # channel/clock.py


def beat_key(rank: int) -> Key[int]:
    """The counter a rank beats under, from its claim until it leaves."""
    return BEAT.at(rank)


def clock_ping_key(ticket: int) -> Key[ClockStamp]:
    """A measuring rank's ping number `ticket`."""
    return CLOCK_PING.at(ticket)


def clock_pong_key(ticket: int) -> Key[ClockStamp]:
    """Rank 0's wall time, answering ping `ticket`."""
    return CLOCK_PONG.at(ticket)


def left_key(rank: int) -> Key[RankLeft]:
    """RankLeft: why a rank left without the verdict (a signal, its own deadline)."""
    return LEFT_WHY.at(rank)


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
