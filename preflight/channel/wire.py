"""A rank's payload on the wire: O(1) in N per rank, and cheap for rank 0 to read 16,384 of.

What crosses the store (or the --out-dir file) is the RankPayload, with three changes that keep
the exchange linear and rank 0's decode fast:

- nothing world-sized: the launcher's layout (World.expected_hosts, every rank's host under
  Slurm) stays on rank 0, which derives it from its own variables; shipping it from every rank
  made the exchange O(N^2) (5.7 GB at 16,384 ranks);
- the environment in two parts: `facts.env` holds the variables that are the same on most
  ranks (sorted, so equal environments are equal bytes) and `own_env` those a launcher sets
  per rank (RANK, SLURM_PROCID, ...; preflight.lib.env_drift.is_per_rank);
- the local checks' outcomes without their durations, which travel apart (`outcome_s`): the
  outcomes were 44% of a payload's bytes and differed between ranks only by their durations.
  Rank 0 merges them per distinct list (`merged_outcomes`), as the report merges them anyway.

Rank 0 decodes each section that ranks share (environment, versions, network, GPUs, outcomes)
once per distinct value, validated by the model's codec like everything else, and gives
every rank with that value the same object: 8x fewer network and GPU sections to decode (one
per host), one environment for most of the job (each rank's `facts.env` a RankEnv: that shared
dict and its own variables, never a merged copy). Those shared objects are read-only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from preflight.lib.env_drift import is_per_rank
from preflight.model import (
    CheckOutcome,
    Finding,
    GpuFacts,
    HealthFacts,
    NetworkFacts,
    RankFacts,
    SystemLimits,
    Versions,
    World,
)
from preflight.model.codec import BadPayload, decode, encode
from preflight.model.placement_facts import PlacementFacts
from preflight.model.rank_env import RankEnv


@dataclass
class RankPayload:
    """What one rank sends to rank 0: its facts and what its local checks found."""

    rank: int
    facts: RankFacts
    findings: list[Finding] = field(default_factory=list)
    outcomes: list[CheckOutcome] = field(default_factory=list)
    own_env: dict[str, str] = field(default_factory=dict)  # on the wire only: see the module docstring
    # The outcomes' durations, in order: on the wire the outcomes travel without them (see the
    # module docstring); as rank 0 reads them, `outcomes` is shared by the ranks that sent the same list.
    outcome_s: list[float] = field(default_factory=list)


@dataclass
class _WireFacts:
    """RankFacts as rank 0 first reads them: the shared sections still undecoded."""

    rank: int
    host: str
    world: World
    env: msgspec.Raw
    versions: msgspec.Raw
    system: SystemLimits  # its pid is every rank's own: decoded here, never shared
    network: msgspec.Raw
    gpus: msgspec.Raw
    health: HealthFacts = field(default_factory=HealthFacts)  # per rank: its own GPU and counters
    placement: PlacementFacts = field(default_factory=PlacementFacts)  # per rank: its CPUs, clock, build
    gather_errors: dict[str, str] = field(default_factory=dict)


@dataclass
class _WirePayload:
    rank: int
    facts: _WireFacts
    outcomes: msgspec.Raw  # list[CheckOutcome], decoded once per distinct value
    findings: list[Finding] = field(default_factory=list)
    own_env: dict[str, str] = field(default_factory=dict)
    outcome_s: list[float] = field(default_factory=list)


_SECTIONS: dict[str, Any] = {"env": dict[str, str], "versions": Versions, "network": NetworkFacts,
                             "gpus": list[GpuFacts], "outcomes": list[CheckOutcome]}


def to_wire(payload: RankPayload) -> bytes:
    """The bytes a rank publishes."""
    facts, world = payload.facts, payload.facts.world
    if payload.rank != 0 and world.expected_hosts:
        world = dataclasses.replace(world, expected_hosts={})
    shared = dict(sorted((k, v) for k, v in facts.env.items() if not is_per_rank(k)))
    own = {k: v for k, v in facts.env.items() if is_per_rank(k)}
    outcomes = [dataclasses.replace(o, duration_s=0.0) for o in payload.outcomes]
    return encode(dataclasses.replace(payload, facts=dataclasses.replace(facts, world=world, env=shared),
                                      own_env=own, outcomes=outcomes,
                                      outcome_s=[o.duration_s for o in payload.outcomes]))


class SharedSections:
    """Rank 0's decoded sections by their bytes: each distinct value decoded (and held) once."""

    def __init__(self) -> None:
        self.decoded: dict[tuple[str, bytes], Any] = {}
        # Each section's last bytes and value: ranks arrive in order, and the next rank most often
        # sent the same (one environment for the job, one network section per host). Comparing
        # with it (a memcmp) saves hashing ~20 kB a rank (0.85 s of CPU at 131,072 ranks).
        self.last: dict[str, tuple[bytes, Any]] = {}

    def get(self, name: str, raw: msgspec.Raw) -> Any:
        data = bytes(raw)
        last = self.last.get(name)
        if last is not None and last[0] == data:
            return last[1]
        key = (name, data)
        found = self.decoded.get(key)
        if found is None:
            found = self.decoded[key] = decode(data, _SECTIONS[name])
        self.last[name] = (data, found)
        return found


# One rank's facts and findings are a few KB to a few hundred KB (a large environment); far more is
# not a preflight payload, and is refused before it is parsed.
MAX_PAYLOAD_BYTES = 8 << 20


def from_wire(data: bytes, shared: SharedSections) -> RankPayload:
    """The RankPayload a rank published (BadPayload when it does not fit the model)."""
    wire = decode(data, _WirePayload, max_bytes=MAX_PAYLOAD_BYTES)
    facts = wire.facts
    try:
        env = RankEnv(shared.get("env", facts.env), wire.own_env)  # the shared part not copied per rank
        return RankPayload(
            rank=wire.rank,
            facts=RankFacts(rank=facts.rank, host=facts.host, world=facts.world, env=env,
                            versions=shared.get("versions", facts.versions),
                            system=facts.system,
                            network=shared.get("network", facts.network), gpus=shared.get("gpus", facts.gpus),
                            health=facts.health, placement=facts.placement,
                            gather_errors=facts.gather_errors),
            findings=wire.findings, outcomes=_outcomes(shared, wire), outcome_s=wire.outcome_s,
        )
    except (TypeError, ValueError) as exc:
        raise BadPayload(str(exc)[:300]) from None


def _outcomes(shared: SharedSections, wire: _WirePayload) -> list[CheckOutcome]:
    outcomes = shared.get("outcomes", wire.outcomes)
    if len(wire.outcome_s) != len(outcomes):
        raise BadPayload(f"{len(wire.outcome_s)} check durations for {len(outcomes)} check outcomes")
    return outcomes


def merged_outcomes(payloads: Iterable[RankPayload]) -> list[CheckOutcome]:
    """The check outcomes of these payloads, as merge_outcomes would merge them, in O(N + checks).

    Ranks that sent the same outcomes share one list (decoded once); each such list is returned
    once, with each check's longest duration over those ranks. A payload whose durations do not
    match its outcomes (built in-process, not read from the wire) gives its outcomes as they are."""
    groups: dict[int, tuple[list[CheckOutcome], list[list[float]]]] = {}
    loose: list[CheckOutcome] = []
    for payload in payloads:
        if len(payload.outcome_s) != len(payload.outcomes):
            loose += payload.outcomes
            continue
        group = groups.get(id(payload.outcomes))
        if group is None:
            groups[id(payload.outcomes)] = (payload.outcomes, [payload.outcome_s])
        else:
            group[1].append(payload.outcome_s)
    return loose + [dataclasses.replace(o, duration_s=s) for outcomes, durations in groups.values()
                    for o, s in zip(outcomes, _longest(durations), strict=True)]


def _longest(durations: list[list[float]]) -> list[float]:
    """Each check's longest duration over these ranks' lists (of one length): max over a few
    thousand lists at a time in C, not a Python call per rank (131,072 x 49 checks: 0.4 s)."""
    longest = durations[0]
    for start in range(1, len(durations), 4096):
        longest = list(map(max, longest, *durations[start:start + 4096]))
    return longest
