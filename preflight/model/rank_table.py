"""Every rank's facts with each distinct value stored once: the report's on-disk shape for ranks.

A 16,384-rank job's ranks share almost everything: one set of versions, one GPU and network
section per host, one environment except the few variables a launcher sets per rank. A
`RankTable` keeps each distinct section once (`worlds`, `versions`, ... are tables of distinct
values) and each rank as a small row of indices plus what is its own: its rank numbers, and its
environment and launcher variables only where they differ from the values most ranks hold
(`env_common`, `raw_common`). `pack` and `unpack` are exact inverses: the RankFacts that come
back equal the ones that went in. Unpacked ranks share their section objects (read-only).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from preflight.model.codec import encode
from preflight.model.health_facts import HealthFacts
from preflight.model.placement_facts import PlacementFacts
from preflight.model.rank_facts import GpuFacts, NetworkFacts, RankFacts, SystemLimits, Versions, World

# The World fields most ranks share (all but rank, local_rank, node_rank, host, raw, expected_hosts);
# decisions last. A field added to World must be named here or in PackedRank (the round-trip test).
_WORLD_SHARED = ("launcher", "world_size", "local_world_size", "num_nodes", "master_addr", "master_port", "job_id",
                 "run_id", "restart_count", "use_agent_store", "node_rank_given", "decisions")
_SAMPLE = 64  # ranks sampled to choose the common values (only the table's size depends on them)


@dataclass
class PackedRank:
    """One rank: indices into the tables, and what differs from the common values."""

    rank: int
    host: str
    world: int
    local_rank: int = 0
    node_rank: int = 0
    versions: int = 0
    system: int = 0
    network: int = 0
    gpus: int = 0
    health: int = 0
    placement: int = 0
    gather_errors: int = 0
    env: dict[str, str] = field(default_factory=dict)  # variables whose value is not env_common's
    env_unset: list[str] = field(default_factory=list)  # env_common's variables this rank lacks
    raw: dict[str, str] = field(default_factory=dict)  # world.raw, the same way against raw_common
    raw_unset: list[str] = field(default_factory=list)
    expected_hosts: dict[int, str] = field(default_factory=dict)  # rank 0's layout, where it has one
    # The World's own rank and host, only where they are not the row's (a malformed payload).
    world_rank: int | None = None
    world_host: str | None = None


@dataclass
class RankTable:
    """Every rank's facts, each distinct section once (see the module docstring)."""

    env_common: dict[str, str] = field(default_factory=dict)
    raw_common: dict[str, str] = field(default_factory=dict)
    worlds: list[World] = field(default_factory=list)  # rank, local_rank, node_rank, host, raw blanked
    versions: list[Versions] = field(default_factory=list)
    system: list[SystemLimits] = field(default_factory=list)
    network: list[NetworkFacts] = field(default_factory=list)
    gpus: list[list[GpuFacts]] = field(default_factory=list)
    health: list[HealthFacts] = field(default_factory=list)
    placement: list[PlacementFacts] = field(default_factory=list)
    gather_errors: list[dict[str, str]] = field(default_factory=list)
    ranks: list[PackedRank] = field(default_factory=list)


class _Interned:
    """Distinct values by their encoded form, in first-seen order."""

    def __init__(self, into: list) -> None:
        self.values = into
        self.index: dict[bytes, int] = {}
        self.by_id: dict[int, int] = {}  # the same object again (rank 0 shares decoded sections)

    def add(self, value: object) -> int:
        known = self.by_id.get(id(value))
        if known is not None:
            return known
        key = encode(value)
        found = self.index.get(key)
        if found is None:
            found = self.index[key] = len(self.values)
            self.values.append(value)
        self.by_id[id(value)] = found  # `value` stays alive in the ranks being packed
        return found


def _common(dicts: Sequence[dict[str, str]]) -> dict[str, str]:
    """The value most of a spread sample holds, for each variable at least half of it has."""
    step = max(1, len(dicts) // _SAMPLE)
    sample = dicts[::step]
    counts = Counter(item for d in sample for item in d.items())
    best: dict[str, tuple[int, str]] = {}
    for (name, value), count in counts.items():
        if count * 2 >= len(sample) and count > best.get(name, (0, ""))[0]:
            best[name] = (count, value)
    return {name: value for name, (_, value) in sorted(best.items())}


def pack(ranks: Sequence[RankFacts]) -> RankTable:
    """The table of `ranks`; O(N) in ranks (each section is encoded once to find its twin)."""
    table = RankTable(env_common=_common([f.env for f in ranks]), raw_common=_common([f.world.raw for f in ranks]))
    worlds, versions, system = _Interned(table.worlds), _Interned(table.versions), _Interned(table.system)
    network, gpus, errors = _Interned(table.network), _Interned(table.gpus), _Interned(table.gather_errors)
    health, placement = _Interned(table.health), _Interned(table.placement)
    world_index: dict[tuple, int] = {}  # the shared fields of a World -> its index in table.worlds
    for facts in ranks:
        world = facts.world
        key = tuple(getattr(world, name) for name in _WORLD_SHARED)
        key = (*key[:-1], tuple(key[-1]))  # decisions, a list, hashable
        if key not in world_index:
            world_index[key] = worlds.add(dataclasses.replace(
                world, rank=0, local_rank=0, node_rank=0, host="", raw={}, expected_hosts={}))
        table.ranks.append(PackedRank(
            rank=facts.rank, host=facts.host, world=world_index[key], local_rank=world.local_rank,
            node_rank=world.node_rank, versions=versions.add(facts.versions), system=system.add(facts.system),
            network=network.add(facts.network), gpus=gpus.add(facts.gpus), health=health.add(facts.health),
            placement=placement.add(facts.placement),
            gather_errors=errors.add(facts.gather_errors),
            env=_differing(facts.env, table.env_common), env_unset=_unset(facts.env, table.env_common),
            raw=_differing(world.raw, table.raw_common), raw_unset=_unset(world.raw, table.raw_common),
            expected_hosts=world.expected_hosts,
            world_rank=None if world.rank == facts.rank else world.rank,
            world_host=None if world.host == facts.host else world.host,
        ))
    return table


def _differing(values: dict[str, str], common: dict[str, str]) -> dict[str, str]:
    return dict(sorted((name, value) for name, value in values.items() if common.get(name) != value))


def _unset(values: dict[str, str], common: dict[str, str]) -> list[str]:
    return [name for name in common if name not in values]


def _restore(common: dict[str, str], own: dict[str, str], unset: list[str]) -> dict[str, str]:
    values = {**common, **own}
    for name in unset:
        values.pop(name, None)
    return values


def unpack(table: RankTable) -> list[RankFacts]:
    """The RankFacts `pack` was given, in the same order."""
    facts = []
    for row in table.ranks:
        shared = table.worlds[row.world]
        world = dataclasses.replace(
            shared, rank=row.rank if row.world_rank is None else row.world_rank,
            host=row.host if row.world_host is None else row.world_host,
            local_rank=row.local_rank, node_rank=row.node_rank,
            raw=_restore(table.raw_common, row.raw, row.raw_unset), expected_hosts=row.expected_hosts,
        )
        facts.append(RankFacts(
            rank=row.rank, host=row.host, world=world, env=_restore(table.env_common, row.env, row.env_unset),
            versions=table.versions[row.versions], system=table.system[row.system],
            network=table.network[row.network], gpus=table.gpus[row.gpus],
            health=table.health[row.health] if row.health < len(table.health) else HealthFacts(),
            placement=table.placement[row.placement] if row.placement < len(table.placement) else PlacementFacts(),
            gather_errors=table.gather_errors[row.gather_errors],
        ))
    return facts
