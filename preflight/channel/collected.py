"""What rank 0 received in step 4, and the one place a peer's payload enters rank 0.

`Collected` holds the payloads by rank and what became of the ranks that sent none that can
be counted: an unreadable payload (RUN002), a rank claimed by two processes (RANK002, neither
counted: channel/roster.py), a rank that died after joining the store (RUN008). `accept` decodes
and validates one payload into the typed model; `own_findings_only` keeps a rank from speaking
for another (RUN006).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from msgspec import Struct

from preflight.channel.wire import RankPayload, SharedSections, from_wire, merged_outcomes, read_stamp, this_stamp
from preflight.checks.run_findings import foreign_findings_dropped, rank_died, unreadable_payload
from preflight.model import CheckOutcome, Finding, RankFacts
from preflight.model.agreement import RankStamp
from preflight.model.codec import BadPayload


class DeadRank(Struct):
    """A rank that joined the store and then stopped beating before its payload arrived."""

    host: str
    how: str


@dataclass
class Collected:
    """What rank 0 received: payloads by rank, and how each arrived."""

    payloads: dict[int, RankPayload] = field(default_factory=dict)
    bad_payloads: dict[int, str] = field(default_factory=dict)  # rank -> why it was rejected
    # rank -> every claimant (host, pid): two processes claimed it, neither is counted
    duplicates: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    dead: dict[int, DeadRank] = field(default_factory=dict)  # joined, then died before publishing
    stale_files: list[str] = field(default_factory=list)  # --out-dir files of another run, ignored
    # rank -> the stamp of its unreadable payload when another preflight wrote it: named by RUN011, not RUN002
    stamps: dict[int, RankStamp] = field(default_factory=dict)
    shared: SharedSections = field(default_factory=SharedSections, repr=False)  # sections decoded once

    def heard(self, own_rank: int = 0) -> set[int]:
        """Ranks rank 0 need not wait for any more: reported, unreadable, contested, dead, or itself."""
        return {*self.payloads, *self.bad_payloads, *self.duplicates, *self.dead, own_rank}

    def complete(self, world_size: int, own_rank: int = 0) -> bool:
        """Whether rank 0 has heard from every rank.

        Once its own rank is claimed twice, another job's rank 0 shares this store, and a
        second job of the same size brings a second claimant for every rank: until the
        deadline only a rank claimed twice (or dead) is heard, so none of its ranks is counted."""
        if own_rank in self.duplicates:
            return len({own_rank, *self.duplicates, *self.dead}) >= world_size
        return len(self.heard(own_rank)) >= world_size

    def merged_with(self, own: RankPayload) -> tuple[list[RankFacts], list[Finding], list[CheckOutcome]]:
        """Rank 0's own payload plus every peer's, by rank; an unreadable payload is a RUN002
        finding, a rank that died during the exchange RUN008."""
        payloads = {**self.payloads, own.rank: own}
        ordered = [payloads[rank] for rank in sorted(payloads)]
        facts = [payload.facts for payload in ordered]
        findings: list[Finding] = []
        for payload in ordered:
            if payload.findings and payload is not own:  # most ranks found nothing: no call for them
                findings += own_findings_only(payload)
        outcomes = merged_outcomes(payload for payload in ordered if payload is not own)
        for rank, reason in sorted(self.bad_payloads.items()):
            if rank not in self.stamps:
                findings += unreadable_payload.report(rank=rank, reason=reason)
        for rank, dead in sorted(self.dead.items()):
            findings += rank_died.report(rank=rank, host=dead.host, how=dead.how,
                                         when="during the exchange, after it joined the store")
        return facts, findings, outcomes

    def agreement(self, own: RankPayload) -> dict[int, tuple[RankStamp, dict[str, str] | None]]:
        """Each rank's stamp and agreeing options (None: its payload did not decode), rank 0's own included,
        for options/agreement.disagreements."""
        found: dict[int, tuple[RankStamp, dict[str, str] | None]] = {
            rank: (payload.stamp, payload.options) for rank, payload in self.payloads.items()}
        found.update((rank, (stamp, None)) for rank, stamp in self.stamps.items())
        found[own.rank] = (own.stamp, own.options)
        return found

    def missing(self, world_size: int, own_rank: int = 0) -> list[int]:
        """Ranks that are not in the report (never the collecting rank itself, even when its store
        failed): those that never reported and those that died (RUN008 names them); a contested
        rank is RANK002's, not missing."""
        return [r for r in range(world_size)
                if r != own_rank and r not in self.payloads and r not in self.bad_payloads
                and r not in self.duplicates]

    def drop(self, rank: int) -> None:
        """Count nothing that arrived as `rank` (two processes claimed it)."""
        self.payloads.pop(rank, None)
        self.bad_payloads.pop(rank, None)


def own_findings_only(payload: RankPayload) -> list[Finding]:
    """A rank's findings that concern only its own rank and host; a RUN006 finding for any others.

    Its local checks judge only its own facts, so nothing it sends may blame another rank or
    host (which would otherwise reach the exclude list on one process's word).
    """
    rank, host = payload.rank, payload.facts.host
    kept: list[Finding] = []
    dropped: list[Finding] = []
    for finding in payload.findings:
        mine = set(finding.ranks) <= {rank} and set(finding.hosts) <= {host}
        (kept if mine else dropped).append(finding)
    if not dropped:
        return kept
    example = f"{dropped[0].check_id} on ranks {dropped[0].ranks[:4]} hosts {dropped[0].hosts[:4]}"
    return kept + foreign_findings_dropped.report(rank=rank, dropped=len(dropped), example=example[:200])


def accept_many(collected: Collected, ranks: Sequence[int], raws: Sequence[bytes]) -> None:
    """Decode a chunk of payloads with the cyclic garbage collector paused, then freeze them.

    Payloads live until the run ends; without this, each automatic collection rescans every
    payload decoded so far, and decoding 16,384 of them costs 3x more (measured)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        for rank, raw in zip(ranks, raws):
            accept(collected, rank, raw)
    finally:
        if paused:
            gc.enable()
        gc.freeze()  # move what is alive now out of the collector's generations


def accept_referenced(collected: Collected, ranks: Sequence[int], raws: Sequence[bytes],
                      fetch: Callable[[list[str]], Sequence[bytes | None]]) -> list[str]:
    """Decode a chunk of payloads as they come through the store (sections.store_form): first the shared
    sections they name that rank 0 has not seen, `fetch`ed once each (None where absent) and checked
    against their digests, then the payloads (accept_many). The digests learned: rank 0 holds them
    decoded now, and their keys may be emptied."""
    wanted = collected.shared.missing(raws)
    learned = collected.shared.learn(wanted, fetch(list(wanted)) if wanted else [])
    accept_many(collected, ranks, raws)
    return learned


def accept(collected: Collected, rank: int, raw: bytes) -> None:
    """Decode and validate one rank's payload: the one place a peer's data enters rank 0."""
    try:
        payload = from_wire(raw, collected.shared)
        if payload.rank != rank or payload.facts.rank != rank:
            raise BadPayload(f"payload names rank {payload.rank}")
    except BadPayload as exc:
        collected.bad_payloads[rank] = str(exc)[:200]
        stamp = read_stamp(raw)
        if stamp is not None and stamp != this_stamp():  # another preflight's layout: named as such
            collected.stamps[rank] = stamp
        return
    collected.payloads[rank] = payload
