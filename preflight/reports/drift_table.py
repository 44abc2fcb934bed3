"""Environment drift across ranks: the variables whose values are not the same everywhere.

Which variables drift is decided in one place, preflight.lib.env_drift, which the ENV003/ENV004
checks use too. Secrets arrive redacted; they are shown as numbered placeholders.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import Struct, field

from preflight.lib.env_drift import drifting_rows, secret_numbers, value_label
from preflight.lib.grouping import LastAnswerKept, hosts_by_row, numbers_by_row
from preflight.lib.hostlist import compress_hostlist
from preflight.model import JobReport, RankFacts
from preflight.reports.common import rank_ranges

UNSET = "(unset)"


class DriftValue(Struct):
    """One value of a drifting variable and who holds it."""

    value: str
    count: int
    ranks: str  # compressed rank ranges
    hosts: str  # compressed hostlist


class DriftRow(Struct):
    """A variable whose value differs between ranks; values most common first."""

    variable: str
    values: list[DriftValue] = field(default_factory=list)
    distinct: int = 0  # number of distinct values, including ones cut from `values`


MAX_VALUES = 6  # values shown per variable at most (the HTML's; the text views show 3)


def env_drift(report: JobReport, max_values: int = MAX_VALUES) -> list[DriftRow]:
    """Every variable not identical on all reporting ranks (preflight.lib.env_drift decides which),
    each with its `max_values` most common values (at most MAX_VALUES)."""
    rows = _rows(report.ranks)
    if max_values >= MAX_VALUES:
        return rows
    return [DriftRow(row.variable, row.values[:max_values], row.distinct) for row in rows]


@LastAnswerKept
def _rows(ranks: Sequence[RankFacts]) -> list[DriftRow]:
    """env_drift's rows with MAX_VALUES values each (read-only; kept: the text, terminal and HTML views
    each show the table, and each row's rank ranges and hosts are a pass over its ranks)."""
    numbers, hosts = numbers_by_row(ranks), hosts_by_row(ranks)
    rows = []
    for name, groups in drifting_rows(ranks).items():
        numbers_of_secrets = secret_numbers(list(groups))
        values = [
            DriftValue(
                UNSET if value is None else value_label(value, numbers_of_secrets),
                len(group),
                rank_ranges(numbers[row] for row in group),
                compress_hostlist(sorted({hosts[row] for row in group})),
            )
            for value, group in list(groups.items())[:MAX_VALUES]
        ]
        rows.append(DriftRow(name, values, len(groups)))
    # A variable that only a few ranks disagree on is the likely fault: fewest dissenters first.
    rows.sort(key=lambda row: (-row.values[0].count, row.variable))
    return rows
