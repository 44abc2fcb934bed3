"""A rank's payload on the wire: O(1) in N per rank, and cheap for rank 0 to read 16,384 of.

What crosses the store (or the --out-dir file) is the RankPayload, with four changes that keep
the exchange linear and rank 0's decode fast:

- nothing world-sized: the launcher's layout (World.expected_hosts, every rank's host under
  Slurm) stays on rank 0, which derives it from its own variables; shipping it from every rank
  made the exchange O(N^2) (5.7 GB at 16,384 ranks);
- the environment in two parts: `facts.env` holds the variables that are the same on most
  ranks (sorted, so equal environments are equal bytes) and `own_env` those a launcher sets
  per rank (RANK, SLURM_PROCID, ...; preflight.lib.env_drift.is_per_rank);
- the local checks' outcomes without their durations, which travel apart (`outcome_us`): the
  outcomes were 44% of a payload's bytes and differed between ranks only by their durations.
  The durations are whole microseconds (run_checks rounds them to 1 us where it measures them),
  0 to MAX_CHECK_US, sent as the bytes of 4-byte little-endian unsigned numbers (base64 in the JSON:
  decoded in C, where 51 numbers in JSON were ~45% of the own document's decode, 3.6 us a rank), and
  rank 0 holds each rank's as one array of 4-byte numbers: as a list, each
  duration over 256 us was an int object of its own (131,072 ranks x 49 checks: 6.4M objects,
  ~180 MB, on a node whose checks take milliseconds). Rank 0 merges them per distinct list
  (`merged_outcomes`), as the report merges them anyway.

- two JSON documents, a newline between them: first what is the rank's own (`_Own`: its rank,
  host, its place in the World and per-rank launcher variables, limits, health, placement,
  findings, per-rank variables, check durations), then the sections the ranks of a host send
  alike (`SharedDocument`: the environment, the rest of the World, versions, network, GPUs and check
  outcomes: 90% of the bytes; and the parts of health and placement a host's ranks read alike, its
  ports' error counters, its NUMA nodes' CPUs, its build fingerprint, which rank 0 joins back to each
  rank's own part). Compact JSON holds no raw newline, so the first one is the cut.

Through the store the shared document travels by reference (channel/sections.py's `store_form`, issue 44): each
section is replaced by its digest (BLAKE2b of the section's name and bytes) and its bytes go
under `shared/<digest>`, written only by a rank that does not find them there already. A job's
environment, World, versions, check outcomes and (where hosts agree) RDMA ports are then in the
store once for the whole job, and each host's network and GPU sections once per host (its first
rank to publish writes them, the others find them): a rank's payload is its own document and
~500 bytes of digests. Rank 0
fetches each digest it has not seen once (`SharedSections.missing` / `learn`), checks the bytes
against the digest, and decodes them once; a rank whose section differs from its host's has
another digest, so its own section is fetched and every check sees it. Rank 0 empties each key
once read (channel/exchange.py), so the store does not hold N payloads. The --out-dir file
keeps the whole document (`to_wire`): it is read alone.

Rank 0 decodes each rank's own document, and the shared document only when it is not the same
bytes as one it read lately (compared in place: at 131,072 ranks 0.3 GB are parsed, not 2.9 GB);
each section of a new shared document is decoded once per distinct value too (one environment
for the job, one network section per host). Every part is a model type through the codec,
validated like everything else, and every rank with a value gets the same object (each rank's
`facts.env` a RankEnv: that shared dict and its own variables, never a merged copy). Those
shared objects are read-only.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from msgspec import Struct, field

from preflight import __version__
from preflight.channel.sections import (
    MAX_PAYLOAD_BYTES,
    SEPARATOR,
    SharedDocument,
    SharedSections,
)
from preflight.lib.env_drift import is_per_rank
from preflight.model import (
    CheckOutcome,
    Finding,
    HealthFacts,
    RankFacts,
    SystemLimits,
)
from preflight.model.agreement import WIRE_VERSION, RankStamp
from preflight.model.codec import BadPayload, decode, encode
from preflight.model.host_parts import (
    join_health,
    join_placement,
    split_health,
    split_network,
    split_placement,
)
from preflight.model.placement_facts import PlacementFacts
from preflight.model.rank_env import RankEnv
from preflight.model.section_copy import clone

MAX_CHECK_US = 2**32 - 1  # a check's duration on the wire: 71 minutes, far past any check's deadline
# The array type of 4-byte unsigned numbers ('I' is 4 bytes on every platform CPython runs on; said, not assumed).
_US_TYPE = next(code for code in "ILH" if array(code).itemsize == 4)
_SWAP = sys.byteorder != "little"  # the wire's durations are little-endian


class RankPayload(Struct):  # rank 0 holds one per rank and reads them in passes over all of them
    """What one rank sends to rank 0: its facts and what its local checks found."""

    rank: int
    facts: RankFacts
    findings: list[Finding] = field(default_factory=list)
    outcomes: list[CheckOutcome] = field(default_factory=list)
    own_env: dict[str, str] = field(default_factory=dict)  # on the wire only: see the module docstring
    # The outcomes' durations in microseconds, in order: on the wire the outcomes travel without
    # them (see the module docstring); as rank 0 reads them, `outcomes` is shared by the ranks that
    # sent the same list, and the durations are an array("I") (see the module docstring).
    outcome_us: Sequence[int] = field(default_factory=list)
    # Which preflight sent it, and the options every rank must agree on, by flag (options/agreement.py);
    # rank 0 compares them before any collective. On the wire the stamp is in `_Own`, the options in
    # `_Shared` (the same on every rank of a job: decoded once).
    stamp: RankStamp = field(default_factory=RankStamp)
    options: dict[str, str] = field(default_factory=dict)


class _OwnWorld(Struct):
    """A rank's own part of its World: the rest (launcher, sizes, rendezvous, decisions, the
    launcher variables that are not per rank) is the same on every rank of a job, in `SharedDocument`."""

    rank: int
    local_rank: int = 0
    node_rank: int = 0
    host: str = ""
    raw: dict[str, str] = field(default_factory=dict)  # the per-rank launcher variables (is_per_rank)


class _OwnFacts(Struct):
    """A rank's own facts: RankFacts less the sections ranks share (those are in `SharedDocument`).

    Health and placement travel as their encoded bytes: they are a rank's own, but ranks often
    send the same (the same GPU health, the same binding as the same local rank of another
    host), and rank 0 decodes each recent distinct value once (`SharedSections.own_part`)."""

    rank: int
    host: str
    world: _OwnWorld
    health: msgspec.Raw  # HealthFacts; required: msgspec's lax mode (the codec's) refuses a Raw with a default
    placement: msgspec.Raw  # PlacementFacts: its CPUs, clock, build
    system: SystemLimits = field(default_factory=SystemLimits)  # its pid is every rank's own
    gather_errors: dict[str, str] = field(default_factory=dict)


class _Own(Struct):
    """The first document of a payload: what is this rank's own."""

    rank: int
    facts: _OwnFacts
    findings: list[Finding] = field(default_factory=list)
    own_env: dict[str, str] = field(default_factory=dict)
    outcome_us: bytes = b""  # the durations: 4-byte little-endian unsigned microseconds (see the module docstring)
    stamp: RankStamp = field(default_factory=RankStamp)


class _Stamped(Struct):
    """The first document as read when it does not decode as `_Own`: its stamp alone (other fields ignored)."""

    stamp: RankStamp | None = None  # None: no stamp at all (not a preflight payload, or a very old one)


def to_wire(payload: RankPayload) -> bytes:
    """The bytes a rank publishes: its own document, a newline, the shared document."""
    facts, world = payload.facts, payload.facts.world
    health, counters = split_health(facts.health)
    placement, numa_cpus, build = split_placement(facts.placement)
    network, ib_ports = split_network(facts.network)
    if payload.rank != 0 and world.expected_hosts:
        world = msgspec.structs.replace(world, expected_hosts={})
    shared_env = dict(sorted((k, v) for k, v in facts.env.items() if not is_per_rank(k)))
    own_env = {k: v for k, v in facts.env.items() if is_per_rank(k)}
    own_world = _OwnWorld(rank=world.rank, local_rank=world.local_rank, node_rank=world.node_rank, host=world.host,
                          raw={k: v for k, v in world.raw.items() if is_per_rank(k)})
    shared_world = msgspec.structs.replace(world, rank=0, local_rank=0, node_rank=0, host="",
                                       raw=dict(sorted((k, v) for k, v in world.raw.items() if not is_per_rank(k))))
    own = _Own(rank=payload.rank, findings=payload.findings, own_env=own_env, stamp=payload.stamp,
               outcome_us=_durations_bytes(payload.outcomes),
               facts=_OwnFacts(rank=facts.rank, host=facts.host, world=own_world, system=facts.system,
                               health=msgspec.Raw(encode(health)), placement=msgspec.Raw(encode(placement)),
                               gather_errors=facts.gather_errors))
    outcomes = [msgspec.structs.replace(o, duration_s=0.0) for o in payload.outcomes]
    shared = SharedDocument(env=shared_env, world=shared_world, versions=facts.versions, network=network,
                            gpus=facts.gpus, outcomes=outcomes, options=payload.options,
                            ib_counters=counters, numa_cpus=numa_cpus, build=build, ib_ports=ib_ports)
    return encode(own) + SEPARATOR + encode(shared)


def from_wire(data: bytes, shared: SharedSections) -> RankPayload:
    """The RankPayload a rank published (BadPayload when it does not fit the model)."""
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise BadPayload(f"expected JSON bytes, got {type(data).__name__}")
    if len(data) > MAX_PAYLOAD_BYTES:
        raise BadPayload(f"{len(data)} bytes is more than the maximum {MAX_PAYLOAD_BYTES}")
    cut = data.find(SEPARATOR)
    if cut < 0:
        raise BadPayload("not a payload: no shared sections after the rank's own")
    own = decode(data[:cut], _Own, max_bytes=MAX_PAYLOAD_BYTES)
    env, world, versions, network, gpus, outcomes, options, counters, numa_cpus, build, _ = shared.sections(
        data, cut + 1)
    facts, mine = own.facts, own.facts.world
    health = shared.joined((shared.own_part("health", facts.health, HealthFacts), counters), join_health)
    placement = shared.joined((shared.own_part("placement", facts.placement, PlacementFacts), numa_cpus, build),
                              join_placement)
    try:
        durations = _durations(own.outcome_us)
        if len(durations) != len(outcomes):
            raise BadPayload(f"{len(durations)} check durations for {len(outcomes)} check outcomes")
        # The job's World with this rank's own fields: a copy without re-running __init__ (every
        # field was validated as it was decoded), its launcher variables the shared ones and its own.
        world = clone(world, rank=mine.rank, local_rank=mine.local_rank, node_rank=mine.node_rank, host=mine.host,
                      raw=RankEnv(world.raw, mine.raw))
        return RankPayload(
            rank=own.rank,
            facts=RankFacts(rank=facts.rank, host=facts.host, world=world,
                            env=RankEnv(env, own.own_env),  # the shared part not copied per rank
                            versions=versions, system=facts.system, network=network, gpus=gpus,
                            health=health, placement=placement, gather_errors=facts.gather_errors),
            findings=own.findings, outcomes=outcomes, outcome_us=durations, stamp=own.stamp,
            options=options,
        )
    except (TypeError, ValueError) as exc:
        raise BadPayload(str(exc)[:300]) from None


def _durations_bytes(outcomes: Sequence[CheckOutcome]) -> bytes:
    """The outcomes' durations as the wire carries them: whole microseconds, clamped to what fits."""
    durations = array(_US_TYPE, [min(MAX_CHECK_US, max(0, round(o.duration_s * 1e6))) for o in outcomes])
    if _SWAP:
        durations.byteswap()
    return durations.tobytes()


def _durations(data: bytes) -> array:
    """The durations a rank sent (see `_durations_bytes`); BadPayload for bytes that are no whole number of them."""
    if len(data) % 4:
        raise BadPayload(f"{len(data)} bytes of check durations: not a whole number of 4-byte durations")
    durations = array(_US_TYPE)
    durations.frombytes(data)
    if _SWAP:
        durations.byteswap()
    return durations


def this_stamp() -> RankStamp:
    """This process's stamp: the preflight it runs and the layout it writes."""
    return RankStamp(preflight=__version__, wire=WIRE_VERSION)


def read_stamp(data: Any) -> RankStamp | None:
    """The stamp of a payload that did not decode (another preflight's layout), None when it has none."""
    if not isinstance(data, bytes) or len(data) > MAX_PAYLOAD_BYTES:
        return None
    try:
        return decode(data[:data.find(SEPARATOR)] if SEPARATOR in data else data, _Stamped).stamp
    except (BadPayload, TypeError, ValueError):
        return None


def merged_outcomes(payloads: Iterable[RankPayload]) -> list[CheckOutcome]:
    """The check outcomes of these payloads, as merge_outcomes would merge them, in O(N + checks).

    Ranks that sent the same outcomes share one list (decoded once); each such list is returned
    once, with each check's longest duration over those ranks. A payload whose durations do not
    match its outcomes (built in-process, not read from the wire) gives its outcomes as they are."""
    groups: dict[int, tuple[list[CheckOutcome], list[Sequence[int]]]] = {}
    loose: list[CheckOutcome] = []
    for payload in payloads:
        if len(payload.outcome_us) != len(payload.outcomes):
            loose += payload.outcomes
            continue
        group = groups.get(id(payload.outcomes))
        if group is None:
            groups[id(payload.outcomes)] = (payload.outcomes, [payload.outcome_us])
        else:
            group[1].append(payload.outcome_us)
    return loose + [msgspec.structs.replace(o, duration_s=us / 1e6) for outcomes, durations in groups.values()
                    for o, us in zip(outcomes, _longest(durations), strict=True)]


def _longest(durations: list[Sequence[int]]) -> Sequence[int]:
    """Each check's longest duration over these ranks' lists (of one length): max in C, not a Python call
    per rank (131,072 x 49 checks: 0.4 s). The arrays read from the wire are joined into one buffer, each
    check's column a strided view of it (0.14 -> 0.11 s); lists (payloads built in-process) a few
    thousand at a time."""
    checks = len(durations[0])
    try:
        joined = memoryview(b"".join(durations)).cast(_US_TYPE)  # type: ignore[arg-type]
    except TypeError:  # not buffers: lists of numbers
        longest = durations[0]
        for start in range(1, len(durations), 4096):
            longest = list(map(max, longest, *durations[start:start + 4096]))
        return longest
    return [max(joined[check::checks]) for check in range(checks)]
