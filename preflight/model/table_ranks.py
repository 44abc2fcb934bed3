"""A loaded report's ranks, read from its rank table; RankFacts made only when a reader asks.

`preflight report` at 131,072 ranks spent more on rebuilding every rank's RankFacts from the
report's rank table (model/rank_unpack.unpack: a World, a SystemLimits and an environment per rank)
than on reading the JSON, and its renderers then read only each rank's number and host, its
health section and, for the environment drift, the few variables that differ: all of which the
table holds as columns. `TableRanks` is `JobReport.ranks` as reports/json.py loads it: a sequence
of RankFacts (it compares equal to, and encodes as, the list `unpack` gives, built on first use
and kept), whose table the functions below read without building one RankFacts.

Those functions are what a renderer reads of many ranks, from either form: `TableRanks` or a
plain list (rank 0's own report, before any JSON). Each returns, by row, what
`[f.<field> for f in ranks]` would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from preflight.model.health_facts import HealthFacts
from preflight.model.rank_env import RankEnv
from preflight.model.rank_facts import RankFacts
from preflight.model.rank_table import RankColumns, RankTable
from preflight.model.rank_unpack import check_columns, column_cells, health_by_row, unpack


class TableRanks(Sequence[RankFacts]):
    """A schema-3 to 5 rank table read as the list of RankFacts it packs (see the module docstring).

    The table is checked when this is made (check_columns): unpacking it later cannot fail.
    """

    __slots__ = ("_facts", "table")

    def __init__(self, table: RankTable) -> None:
        if table.columns is None:
            raise ValueError("a rank table without columns (schema 2) is unpacked where it is read")
        check_columns(table)
        self.table = table
        self._facts: list[RankFacts] | None = None

    @property
    def columns(self) -> RankColumns:
        """The table's columns (never None here)."""
        assert self.table.columns is not None
        return self.table.columns

    def facts(self) -> list[RankFacts]:
        """Every rank's RankFacts: unpacked on the first call, then kept."""
        if self._facts is None:
            self._facts = unpack(self.table)
        return self._facts

    def __len__(self) -> int:
        return len(self.columns.rank)

    @overload
    def __getitem__(self, index: int) -> RankFacts: ...

    @overload
    def __getitem__(self, index: slice) -> list[RankFacts]: ...

    def __getitem__(self, index: int | slice) -> RankFacts | list[RankFacts]:
        return self.facts()[index]

    def __iter__(self) -> Iterator[RankFacts]:
        return iter(self.facts())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TableRanks):
            other = other.facts()
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return self.facts() == list(other)

    __hash__ = None  # type: ignore[assignment]  # a sequence, as list: unhashable

    def __repr__(self) -> str:
        return f"TableRanks({len(self)} ranks)"

    def __reduce__(self) -> tuple[Any, ...]:
        return TableRanks, (self.table,)


def rank_numbers(ranks: Sequence[RankFacts]) -> Sequence[int]:
    """Each rank's number, by row."""
    if isinstance(ranks, TableRanks):
        return ranks.columns.rank
    return [facts.rank for facts in ranks]


def hosts(ranks: Sequence[RankFacts]) -> Sequence[str]:
    """Each rank's host, by row."""
    if isinstance(ranks, TableRanks):
        return ranks.columns.host
    return [facts.host for facts in ranks]


def health(ranks: Sequence[RankFacts]) -> Sequence[HealthFacts]:
    """Each rank's health section, by row (the table's rows share their host's, as unpack's do)."""
    if not isinstance(ranks, TableRanks):
        return [facts.health for facts in ranks]
    return health_by_row(ranks.table)


def env_differing(ranks: Sequence[RankFacts]) -> set[str] | None:
    """The variables whose value (or absence) is not the table's common one on some row: a superset of
    the drifting ones; None for a plain list (its reader compares the environments itself)."""
    if not isinstance(ranks, TableRanks):
        return None
    columns = ranks.columns
    return set(columns.env) | set(columns.env_unset)


def env_values(ranks: Sequence[RankFacts], name: str) -> list[str | None]:
    """Each rank's value of the variable `name` (None: unset), by row."""
    if not isinstance(ranks, TableRanks):
        return _values_of(ranks, name)
    table, columns = ranks.table, ranks.columns
    values: list[str | None] = [table.env_common.get(name)] * len(columns.rank)
    for row, value in column_cells(columns.env.get(name, {})):
        values[row] = value
    for row in columns.env_unset.get(name, ()):
        values[row] = None
    return values


def _values_of(ranks: Sequence[RankFacts], name: str) -> list[str | None]:
    """env_values of RankFacts: a RankEnv's shared part (model/rank_env.py) looked up once per shared dict, then
    per rank its own part, in this loop (RankEnv.get is a Python call per rank: 131,072 ranks 44 -> 27 ms)."""
    values: list[str | None] = []
    append = values.append
    last_shared: object = None
    from_shared = None
    for facts in ranks:
        env = facts.env
        if type(env) is RankEnv:
            if env.shared is not last_shared:
                last_shared, from_shared = env.shared, env.shared.get(name)
            append(env.own.get(name, from_shared))
        else:
            append(env.get(name))
    return values
