"""A report's rank table read back: every rank's RankFacts (`unpack`), and each row's health and placement
with their host parts joined (`health_by_row`, `placement_by_row`), from a table checked to fit first
(`check_columns`). The table's shape and `pack` are model/rank_table.py; a loaded report reads its ranks
through model/table_ranks.py, which unpacks them only when asked.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from preflight.model.health_facts import HealthFacts
from preflight.model.host_parts import join_health, join_network, join_placement
from preflight.model.placement_facts import PlacementFacts
from preflight.model.rank_env import RankEnv
from preflight.model.rank_facts import NetworkFacts, RankFacts
from preflight.model.rank_table import Column, RankTable
from preflight.model.section_copy import clone

T = TypeVar("T")


def column_cells(column: Column) -> Iterable[tuple[int, str]]:
    """(row, value) of a column, either form."""
    if isinstance(column, dict):
        return column.items()
    return ((row, value) for row, value in enumerate(column) if value is not None)


def _restore(common: dict[str, str], own: dict[str, str], unset: list[str]) -> dict[str, str]:
    values = {**common, **own}
    for name in unset:
        values.pop(name, None)
    return values


def check_columns(table: RankTable) -> None:
    """ValueError where a schema-3 to 5 table's columns do not fit its tables (a report edited or cut
    short): `unpack` can then not fail, whenever it runs (model/table_ranks.py unpacks on first use)."""
    cols = table.columns
    if cols is None:
        return
    rows = len(cols.rank)
    if any(len(column) != rows for column in (cols.host, cols.world, cols.local_rank, cols.node_rank, cols.versions,
                                              cols.system, cols.network, cols.gpus, cols.health, cols.gather_errors,
                                              cols.pid)):
        raise ValueError("the rank table's columns differ in length")
    if len(cols.placement) > rows:
        raise ValueError("the rank table's placement column is longer than its rows")
    # The host parts' three columns: all one index a row, or all empty (written before them, schema 3).
    if {len(cols.ib_counters), len(cols.numa_cpus), len(cols.build)} not in ({0}, {rows}):
        raise ValueError("the rank table's host part columns are not one index a row")
    if len(cols.ib_ports) not in (0, rows):  # empty: written before the ports were apart (schema 4 and before)
        raise ValueError("the rank table's ib_ports column is not one index a row")
    for name, into in _INDEXED.items():
        if not _within(getattr(cols, name), len(getattr(table, into))):
            raise ValueError(f"the rank table's {name} index is out of range")
    # (health and placement: past its table, no section, the default one; never negative: rank_table.Index)
    for differing, unset in ((cols.env, cols.env_unset), (cols.raw, cols.raw_unset)):
        for column in differing.values():
            if not _within(column.keys() if isinstance(column, dict) else range(len(column)), rows):
                raise ValueError("a rank table variable's rows are out of range")
        for lacking in unset.values():
            if not _within(lacking, rows):
                raise ValueError("a rank table variable's unset rows are out of range")


# Each index column and the table of distinct values it points into.
_INDEXED = {"world": "worlds", "versions": "versions", "system": "system", "network": "network", "gpus": "gpus",
            "gather_errors": "gather_errors", "ib_counters": "ib_counters", "numa_cpus": "numa_cpus",
            "build": "builds", "ib_ports": "ib_ports"}


def _within(indices: Collection[int], size: int) -> bool:
    """Whether every index is one of range(size) (true of none): below it, as none is negative (a decoded
    table's indices are rank_table.Index, refused below 0 as they are read; pack makes none)."""
    return not indices or max(indices) < size


def unpack(table: RankTable) -> list[RankFacts]:
    """The RankFacts `pack` was given, in the same order."""
    if table.columns is None:
        return _unpack_rows(table)
    check_columns(table)
    cols = table.columns
    rows = len(cols.rank)
    # A row's environment: env_common, shared by every row (a RankEnv: no copy of ~150 variables
    # per rank), and its own values; a row that lacks a common variable gets a dict of its own.
    # Its World's launcher variables the same way, against raw_common.
    own, own_raw = _own_values(cols.env, rows), _own_values(cols.raw, rows)
    env: list[Mapping[str, str]] = [RankEnv(table.env_common, values) for values in own]
    raw: list[Mapping[str, str]] = [RankEnv(table.raw_common, values) for values in own_raw]  # the same way
    for into, unset in ((env, cols.env_unset), (raw, cols.raw_unset)):
        for name, lacking in unset.items():
            for row in lacking:
                values = into[row]
                if not isinstance(values, dict):
                    values = into[row] = dict(values)
                values.pop(name, None)
    world_rank, world_host, expected = cols.world_rank, cols.world_host, cols.expected_hosts
    facts = []
    # A row at a time over the columns together (zip), each World a copy of its shared one (clone:
    # every field was validated when the table was decoded).
    for row, (rank, host, world_index, local_rank, node_rank, versions, system, pid, network, gpus, health, placement,
              errors, row_env, row_raw) in enumerate(zip(
            cols.rank, cols.host, cols.world, cols.local_rank, cols.node_rank, cols.versions, cols.system, cols.pid,
            network_by_row(table), cols.gpus, health_by_row(table), placement_by_row(table), cols.gather_errors, env,
            raw)):
        world = clone(table.worlds[world_index], rank=world_rank.get(row, rank) if world_rank else rank,
                      host=world_host.get(row, host) if world_host else host, local_rank=local_rank,
                      node_rank=node_rank, raw=row_raw, expected_hosts=expected.get(row, {}) if expected else {})
        facts.append(RankFacts(
            rank=rank, host=host, world=world, env=row_env, versions=table.versions[versions],
            system=clone(table.system[system], pid=pid), network=network, gpus=table.gpus[gpus], health=health,
            placement=placement, gather_errors=table.gather_errors[errors],
        ))
    return facts


def network_by_row(table: RankTable) -> list[NetworkFacts]:
    """Each row's network section (a schema-3+ table): its host's own part joined with its RDMA ports (schema
    5), one object for the rows with the same two; the table's section as it is before schema 5."""
    cols = table.columns
    assert cols is not None
    if not cols.ib_ports:
        return [table.network[index] for index in cols.network]
    return _once_per_key(zip(cols.network, cols.ib_ports),
                         lambda own, ports: join_network(table.network[own], table.ib_ports[ports]))


def health_by_row(table: RankTable) -> list[HealthFacts]:
    """Each row's health (a schema-3+ table): its own part joined with its host's port counters, one object
    for the rows with the same two; a HealthFacts() where its index is past the table (none gathered)."""
    cols = table.columns
    assert cols is not None
    hosts: Sequence[int | None] = cols.ib_counters or [None] * len(cols.rank)

    def joined(own: int, host: int | None) -> HealthFacts:
        base = table.health[own] if own < len(table.health) else HealthFacts()
        return base if host is None else join_health(base, table.ib_counters[host])

    return _once_per_key(zip(cols.health, hosts), joined)


def placement_by_row(table: RankTable) -> list[PlacementFacts]:
    """Each row's placement (a schema-3+ table), as health_by_row: its own part joined with its host's NUMA
    CPUs and build fingerprint; a PlacementFacts() where there is none (a report from before placement)."""
    cols = table.columns
    assert cols is not None
    rows = len(cols.rank)
    own_parts = cols.placement + [len(table.placement)] * (rows - len(cols.placement))  # none before schema 3.1
    numa: Sequence[int | None] = cols.numa_cpus or [None] * rows
    builds: Sequence[int | None] = cols.build or [None] * rows

    def joined(own: int, host_numa: int | None, build: int | None) -> PlacementFacts:
        base = table.placement[own] if own < len(table.placement) else PlacementFacts()
        if host_numa is not None and build is not None:
            base = join_placement(base, table.numa_cpus[host_numa], table.builds[build])
        return base

    return _once_per_key(zip(own_parts, numa, builds), joined)


def _once_per_key(keys: Iterable[tuple[Any, ...]], make: Callable[..., T]) -> list[T]:
    """make(*key) for each row's key, made once per distinct key: the rows with the same parts share one object."""
    made: dict[tuple[Any, ...], T] = {}
    found = []
    for key in keys:
        value = made.get(key)
        if value is None:
            value = made[key] = make(*key)
        found.append(value)
    return found


def _own_values(differing: dict[str, Column], rows: int) -> list[dict[str, str]]:
    """Each row's own variables from their columns. The dense columns without a gap (a launcher's
    per-rank variables: every row differs) are zipped into each row's dict in C; the others are
    read cell by cell."""
    whole = {name: column for name, column in differing.items()
             if isinstance(column, list) and len(column) == rows and None not in column}
    if whole:
        names = tuple(whole)
        own: list[dict[str, str]] = [dict(zip(names, values)) for values in zip(*whole.values())]
    else:
        own = [{} for _ in range(rows)]
    for name, column in differing.items():
        if name not in whole:
            for row, value in column_cells(column):
                own[row][name] = value
    return own


def _unpack_rows(table: RankTable) -> list[RankFacts]:
    """Schema 2: a PackedRank per rank."""
    facts = []
    for row in table.ranks:
        shared = table.worlds[row.world]
        world = msgspec.structs.replace(
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
