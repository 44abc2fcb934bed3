"""Every rank's facts with each distinct value stored once: the report's on-disk shape for ranks.

A 16,384-rank job's ranks share almost everything: one set of versions, one GPU and network
section per host, one environment except the few variables a launcher sets per rank. A
`RankTable` keeps each distinct section once (`worlds`, `versions`, ... are tables of distinct
values) and each rank as a small row of indices plus what is its own: its rank numbers, and its
environment and launcher variables only where they differ from the values most ranks hold
(`env_common`, `raw_common`). `pack` and `unpack` (model/rank_unpack.py) are exact inverses: the
RankFacts that come back equal the ones that went in. Unpacked ranks share their section objects (read-only).

The ranks' own values are columns (`RankColumns`, JSON schemas 3 to 5): one list per field, and per
variable that differs from the common value somewhere, its values by row (a dense list where
most rows differ, a {row: value} map where few do). At 131,072 ranks a row per rank was 131,072
objects of ~20 keys each to write and to decode (3.3 s of `preflight report`'s 6.5 s); a column
of numbers or strings decodes in C. `unpack` still reads schema 2's `ranks` rows. Schema 4 stores the
host parts of health and placement (model/host_parts.py) once per distinct value beside each rank's own
part, as the payload carries them; schema 5 the hosts' RDMA ports apart from their network sections the
same way (one list for a homogeneous job: ~37 of a 131,072-rank report's 116 MB were 16,383 copies of it).
"""

from __future__ import annotations

import hashlib
import operator
import tempfile
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any

import msgspec
from msgspec import Struct, field

from preflight.model.codec import encode
from preflight.model.health_facts import HealthFacts, IbCounters
from preflight.model.host_parts import split_health, split_network, split_placement
from preflight.model.placement_facts import BuildFacts, PlacementFacts
from preflight.model.rank_env import RankEnv
from preflight.model.rank_facts import GpuFacts, IbPort, NetworkFacts, RankFacts, SystemLimits, Versions, World

# The World fields most ranks share (all but rank, local_rank, node_rank, host, raw, expected_hosts);
# decisions last. A field added to World must be named here or in PackedRank (the round-trip test).
_WORLD_SHARED = ("launcher", "world_size", "local_world_size", "num_nodes", "master_addr", "master_port", "job_id",
                 "run_id", "restart_count", "use_agent_store", "node_rank_given", "decisions")
_LIMITS_SHARED = ("cpu_count", "memlock_bytes", "shm_bytes")  # SystemLimits but its pid (every rank's own)
_SAMPLE = 64  # ranks sampled to choose the common values (only the table's size depends on them)


class PackedRank(Struct):
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


# A position in a table of distinct values, or a row: never negative, which the codec refuses as it reads a
# report (rank_unpack.check_columns then looks only at the largest: each min over 131,072 rows was ~1.5 ms).
Index = Annotated[int, msgspec.Meta(ge=0)]

# A variable's values by row where they are not the common value: dense (None: the common value)
# when most rows differ, else sparse, {row: value}.
Column = list[str | None] | dict[Index, str]


class RankColumns(Struct):
    """Every rank's own values, a list per field (row i: the i-th rank given to `pack`)."""

    rank: list[int] = field(default_factory=list)
    host: list[str] = field(default_factory=list)
    world: list[Index] = field(default_factory=list)
    local_rank: list[int] = field(default_factory=list)
    node_rank: list[int] = field(default_factory=list)
    versions: list[Index] = field(default_factory=list)
    system: list[Index] = field(default_factory=list)  # the limits without the pid, which is...
    pid: list[int] = field(default_factory=list)  # ...every rank's own: a column, not 131,072 table entries
    network: list[Index] = field(default_factory=list)
    gpus: list[Index] = field(default_factory=list)
    health: list[Index] = field(default_factory=list)
    placement: list[Index] = field(default_factory=list)  # empty in a report written before placement facts
    gather_errors: list[Index] = field(default_factory=list)
    # The host parts of health and placement (model/host_parts.py), by index; empty in a report written
    # before them (schema 3), whose health and placement hold them.
    ib_counters: list[Index] = field(default_factory=list)
    numa_cpus: list[Index] = field(default_factory=list)
    build: list[Index] = field(default_factory=list)
    ib_ports: list[Index] = field(default_factory=list)  # schema 5; empty before, when `network` holds them
    env: dict[str, Column] = field(default_factory=dict)  # variables some row holds unlike env_common
    env_unset: dict[str, list[Index]] = field(default_factory=dict)  # env_common's variables -> rows that lack it
    raw: dict[str, Column] = field(default_factory=dict)  # world.raw, the same way against raw_common
    raw_unset: dict[str, list[Index]] = field(default_factory=dict)
    expected_hosts: dict[int, dict[int, str]] = field(default_factory=dict)  # row -> rank 0's layout
    # The World's own rank and host, only where they are not the row's (a malformed payload).
    world_rank: dict[int, int] = field(default_factory=dict)
    world_host: dict[int, str] = field(default_factory=dict)


class RankTable(Struct):
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
    ranks: list[PackedRank] = field(default_factory=list)  # schema 2 (read only): a row per rank
    columns: RankColumns | None = None  # schemas 3 to 5: what `pack` writes
    # Schema 4: the host parts of health and placement, each distinct value once (`health` and `placement`
    # hold each rank's own part): a 131,072-rank job on GPU hosts wrote them 131,072 times (~350 MB).
    ib_counters: list[list[IbCounters]] = field(default_factory=list)
    numa_cpus: list[dict[int, list[int]]] = field(default_factory=list)
    builds: list[BuildFacts] = field(default_factory=list)
    # Schema 5: the hosts' RDMA ports, each distinct list once (`network` holds each host's section without them).
    ib_ports: list[list[IbPort]] = field(default_factory=list)


class Spooled:
    """The encoded forms of a table's distinct values in a temporary file, in order, instead of in memory.

    On GPU hosts every rank's own health and placement part differs: at 131,072 ranks their encoded forms
    were ~350 MB of rank 0's peak while the JSON was written (benchmarks/rank0_scale.py --gpu-node). The
    file is in the folder the report goes to (never /tmp, which may be memory), unlinked as it is made."""

    def __init__(self, folder: str) -> None:
        self.file = tempfile.TemporaryFile(dir=folder)
        self.sizes = array("Q")

    def append(self, data: bytes) -> None:
        self.file.write(data)
        self.sizes.append(len(data))

    def __len__(self) -> int:
        return len(self.sizes)

    def __iter__(self) -> Iterator[bytes]:
        self.file.seek(0)
        read = self.file.read
        for size in self.sizes:
            yield read(size)

    def close(self) -> None:
        self.file.close()


class _Interned:
    """Distinct values by their encoded form, in first-seen order. `index`'s keys, in their insertion
    order, are the values' encoded forms: the report's JSON writes them as they are, not encoding the
    16,383 distinct network and GPU sections of a 131,072-rank job a second time. With a `spool` the
    encoded forms go to it and `index` is keyed by their SHA-256 digests (a digest names its bytes, as the
    store's sections' do), so only the digests stay in memory."""

    def __init__(self, into: list, keep_values: bool = True, spool: Spooled | None = None) -> None:
        self.values = into
        self.keep_values = keep_values  # False: `values` stays empty, the encoded forms are the table (`packed`)
        self.spool = spool
        self.index: dict[bytes, int] = {}  # encoded form (or its digest, with a spool) -> its value's position
        self.by_id: dict[int, int] = {}  # the same object again (rank 0 shares decoded sections)

    def add(self, value: object) -> int:
        known = self.by_id.get(id(value))
        if known is not None:
            return known
        found = self.add_new(value)
        self.by_id[id(value)] = found  # `value` stays alive in the ranks being packed
        return found

    def add_new(self, value: object) -> int:
        """`add` for an object made for this call (a rank's own part split from its health): never seen
        by its id, and free to go once encoded."""
        key = encoded = encode(value)
        if self.spool is not None:
            key = hashlib.sha256(encoded).digest()  # SHA-NI on current x86 and Arm servers: ~1.6x BLAKE2b here
        found = self.index.get(key)
        if found is None:
            found = self.index[key] = len(self.index)
            if self.spool is not None:
                self.spool.append(encoded)
            if self.keep_values:
                self.values.append(value)
        return found

    def encoded(self) -> Sequence[bytes] | Spooled:
        """The distinct values' encoded forms, in order."""
        return self.spool if self.spool is not None else list(self.index)


def _split_once(known: dict[int, tuple[int, int]], section: object, split: Callable[[Any], tuple[Any, Any]],
                own: _Interned, host: _Interned) -> tuple[int, int]:
    """The indices of a section's own part and its host part (model/host_parts.py), split once per object (rank
    0's ranks share them where they sent the same): a part split off as a copy is interned by its encoded form
    alone (`add_new`)."""
    own_part, host_part = split(section)
    found = known[id(section)] = ((own.add if own_part is section else own.add_new)(own_part), host.add(host_part))
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


class Packed(Struct):
    """A packed table and, for each of its tables of distinct values, their encoded forms (`encode`
    of each, in order): what `pack` encoded to find twins, which a writer need not encode again."""

    table: RankTable
    encoded: dict[str, Sequence[bytes] | Spooled]

    def close(self) -> None:
        """Let go of the spooled forms' files (a writer's, once written)."""
        for forms in self.encoded.values():
            if isinstance(forms, Spooled):
                forms.close()


def pack(ranks: Sequence[RankFacts]) -> RankTable:
    """The table of `ranks`; O(N) in ranks (each section is encoded once to find its twin)."""
    return packed(ranks).table


def packed(ranks: Sequence[RankFacts], keep_own_parts: bool = True, spool_in: str | None = None) -> Packed:
    """`pack`, with the encoded forms of the distinct values it found (`Packed`).

    keep_own_parts=False, for a writer that needs only the encoded forms: the tables of the ranks' own
    health and placement parts and the hosts' network parts (`health`, `placement`, `network`) are left
    empty, their encoded forms alone kept; with `spool_in` (a folder) those forms are kept in temporary files
    there (`Spooled`), not in memory. The caller closes the Packed when it has written them.
    On GPU hosts every rank's own parts differ, and are copies split from its joined sections: kept as
    values they were ~190 MB of rank 0's peak at 131,072 ranks, while the JSON is written."""
    table = RankTable(env_common=_common([f.env for f in ranks]), raw_common=_common([f.world.raw for f in ranks]))
    worlds, versions = _Interned(table.worlds), _Interned(table.versions)
    limits_index: dict[tuple, int] = {}  # SystemLimits but its pid -> index in table.system
    def spool() -> Spooled | None:
        return Spooled(spool_in) if spool_in is not None and not keep_own_parts else None

    network, gpus, errors = (_Interned(table.network, keep_own_parts, spool()), _Interned(table.gpus),
                             _Interned(table.gather_errors))
    no_errors: dict[str, str] = {}  # every rank whose gatherers all succeeded: one object, found by its id
    health = _Interned(table.health, keep_own_parts, spool())
    placement = _Interned(table.placement, keep_own_parts, spool())
    counters, numa, builds = _Interned(table.ib_counters), _Interned(table.numa_cpus), _Interned(table.builds)
    ports = _Interned(table.ib_ports)
    # A rank's health and placement -> the indices of its own part and its host's parts (split once per
    # object: rank 0's ranks share them where they sent the same). A part split off as a copy is interned
    # by its encoded form alone (`add_new`), and not kept here.
    health_split: dict[int, tuple[int, int]] = {}
    placement_split: dict[int, tuple[int, int, int]] = {}
    network_split: dict[int, tuple[int, int]] = {}  # a network section -> its own part's and its ports' indices
    world_index: dict[tuple, int] = {}  # the shared fields of a World -> its index in table.worlds
    cols = table.columns = RankColumns()
    # Per variable, its values and the rows they are on (rows: None while every row so far has one,
    # as a per-rank variable does: no list of 131,072 row numbers for each of those).
    env: dict[str, tuple[list[int] | None, list[str]]] = {}
    env_unset: dict[str, list[int]] = {}
    raw: dict[str, tuple[list[int] | None, list[str]]] = {}
    raw_unset: dict[str, list[int]] = {}
    against: dict[int, tuple[list[tuple[str, str]], list[str], frozenset[str]]] = {}  # see _collect
    against_raw: dict[int, tuple[list[tuple[str, str]], list[str], frozenset[str]]] = {}
    # One pass, each rank's objects read once while they are in cache (at 131,072 ranks every
    # pass over them costs its memory reads); the appends and lookups bound once, outside it.
    world_key, limits_key = operator.attrgetter(*_WORLD_SHARED[:-1]), operator.attrgetter(*_LIMITS_SHARED)
    add_version, add_gpus = versions.add, gpus.add
    add_placement, add_errors, add_new_placement = placement.add, errors.add, placement.add_new
    rank_col, host_col, world_col, local_col, node_col = (cols.rank.append, cols.host.append, cols.world.append,
                                                          cols.local_rank.append, cols.node_rank.append)
    versions_col, system_col, pid_col, network_col, gpus_col = (cols.versions.append, cols.system.append,
                                                                cols.pid.append, cols.network.append,
                                                                cols.gpus.append)
    health_col, placement_col, errors_col = cols.health.append, cols.placement.append, cols.gather_errors.append
    env_common, raw_common = table.env_common, table.raw_common
    for row, facts in enumerate(ranks):
        world = facts.world
        key = (world_key(world), tuple(world.decisions))  # decisions, a list: hashable as a tuple
        index = world_index.get(key)
        if index is None:
            index = world_index[key] = worlds.add(msgspec.structs.replace(
                world, rank=0, local_rank=0, node_rank=0, host="", raw={}, expected_hosts={}))
        rank, host = facts.rank, facts.host
        rank_col(rank)
        host_col(host)
        world_col(index)
        local_col(world.local_rank)
        node_col(world.node_rank)
        versions_col(add_version(facts.versions))
        limits = facts.system
        shared = limits_key(limits)
        index = limits_index.get(shared)
        if index is None:
            index = limits_index[shared] = len(table.system)
            table.system.append(msgspec.structs.replace(limits, pid=0))
        system_col(index)
        pid_col(limits.pid)
        found = network_split.get(id(facts.network)) or _split_once(network_split, facts.network, split_network,
                                                                     network, ports)
        network_col(found[0])
        cols.ib_ports.append(found[1])
        gpus_col(add_gpus(facts.gpus))
        found = health_split.get(id(facts.health)) or _split_once(health_split, facts.health, split_health, health,
                                                                   counters)
        health_col(found[0])
        cols.ib_counters.append(found[1])
        placed = placement_split.get(id(facts.placement))
        if placed is None:
            own_placement, host_numa, build = split_placement(facts.placement)
            placed = placement_split[id(facts.placement)] = (
                (add_placement if own_placement is facts.placement else add_new_placement)(own_placement),
                numa.add(host_numa), builds.add(build))
        placement_col(placed[0])
        cols.numa_cpus.append(placed[1])
        cols.build.append(placed[2])
        # Every gatherer succeeded (almost every rank): its new empty dict is not encoded to find its twin.
        errors_col(add_errors(facts.gather_errors or no_errors))
        _collect(row, facts.env, env_common, env, env_unset, against)
        _collect(row, world.raw, raw_common, raw, raw_unset, against_raw)
        if world.expected_hosts:
            cols.expected_hosts[row] = world.expected_hosts
        if world.rank != rank:
            cols.world_rank[row] = world.rank
        if world.host != host:
            cols.world_host[row] = world.host
    rows = len(ranks)
    cols.env, cols.env_unset = {name: _column(*_cells_of(env, name), rows) for name in sorted(env)}, env_unset
    cols.raw, cols.raw_unset = {name: _column(*_cells_of(raw, name), rows) for name in sorted(raw)}, raw_unset
    interned = {"worlds": worlds, "versions": versions, "network": network, "gpus": gpus, "health": health,
                 "placement": placement, "gather_errors": errors, "ib_counters": counters, "numa_cpus": numa,
                 "builds": builds, "ib_ports": ports}
    return Packed(table, {name: values.encoded() for name, values in interned.items()})


def _collect(row: int, values: Mapping[str, str], common: dict[str, str],
             differing: dict[str, tuple[list[int] | None, list[str]]], unset: dict[str, list[int]],
             against: dict[int, tuple[list[tuple[str, str]], list[str], frozenset[str]]] | None = None) -> None:
    """Note, per variable, this row's value where it is not the common one, and the common variables it lacks.

    A RankEnv's shared part is compared with `common` once (kept in `against` by the shared dict's
    id: it lives as long as the ranks being packed); per row only its own variables are."""
    if against is not None and type(values) is RankEnv:
        shared, own = values.shared, values.own
        known = against.get(id(shared))
        if known is None:
            lacks = [name for name in common if name not in shared]
            known = against[id(shared)] = (
                [(name, value) for name, value in shared.items() if common.get(name) != value], lacks, frozenset(lacks))
        shared_differing, shared_lacking, lacking_set = known
        items: Iterable[tuple[str, str]] = own.items()
        if shared_differing:
            items = [*(item for item in shared_differing if item[0] not in own), *items]
        # The common variables the shared part lacks are most often the rank's own (a launcher's
        # per-rank variables that happen to agree): one set comparison, not a test per name.
        lacking = None if lacking_set <= own.keys() else [name for name in shared_lacking if name not in own]
        plain = False
    else:
        items, lacking, plain = values.items(), None, True
    for name, value in items:
        if common.get(name) != value:
            cells = differing.get(name)
            if cells is None:
                cells = differing[name] = (None if row == 0 else [], [])
            at, found = cells
            if at is None and len(found) != row:  # a row went without: from now on, say which rows
                at = list(range(len(found)))
                differing[name] = cells = (at, found)
            if at is not None:
                at.append(row)
            found.append(value)
    if lacking is not None:
        for name in lacking:
            unset.setdefault(name, []).append(row)
    elif plain and (len(values) < len(common) or not common.keys() <= values.keys()):
        for name in common:
            if name not in values:
                unset.setdefault(name, []).append(row)


def _cells_of(cells: dict[str, tuple[list[int] | None, list[str]]], name: str) -> tuple[list[int], list[str]]:
    """A variable's rows and values, popped (rows spelled out where they were left implicit)."""
    at, values = cells.pop(name)
    return (range(len(values)) if at is None else at), values  # type: ignore[return-value]


def _column(at: Sequence[int], values: list[str], rows: int) -> Column:
    """Dense where most rows differ (a list, None: the common value), sparse where few do."""
    if 2 * len(values) < rows:
        return dict(zip(at, values))
    if len(at) == rows:  # every row differs (a per-rank variable): the values are the column
        return values  # type: ignore[return-value]
    dense: list[str | None] = [None] * rows
    for row, value in zip(at, values):
        dense[row] = value
    return dense
