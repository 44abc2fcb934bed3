"""Environment drift across ranks: the variables whose values are not the same everywhere.

Computed from `RankFacts.env` (already redacted on each rank, so a secret shows as its
salted hash tag and two ranks holding the same secret still compare equal).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from preflight.hostlist import compress_hostlist
from preflight.model import JobReport
from preflight.reports.common import rank_ranges

UNSET = "(unset)"

# Variables a launcher sets differently on every rank by design: their drift says nothing.
PER_RANK_VARIABLES = frozenset({
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "NODE_RANK", "GROUP_WORLD_SIZE",
    "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_RESTART_COUNT",
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASK_PID", "SLURMD_NODENAME", "SLURM_TOPOLOGY_ADDR",
    "SLURM_GTIDS", "SLURM_LAUNCH_NODE_IPADDR",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_NODE_RANK", "OMPI_FILE_LOCATION",
    "PMI_RANK", "PMIX_RANK", "PMIX_ID", "MPI_LOCALRANKID", "PMI_FD",
    "PET_NODE_RANK", "JOB_COMPLETION_INDEX",
    "HOSTNAME", "HOST", "PWD", "OLDPWD", "SHLVL", "_",
})


@dataclass
class DriftValue:
    """One value of a drifting variable and who holds it."""

    value: str
    count: int
    ranks: str  # compressed rank ranges
    hosts: str  # compressed hostlist


@dataclass
class DriftRow:
    """A variable whose value differs between ranks; values most common first."""

    variable: str
    values: list[DriftValue] = field(default_factory=list)
    distinct: int = 0  # number of distinct values, including ones cut from `values`


def env_drift(report: JobReport, max_values: int = 6) -> list[DriftRow]:
    """Every variable (except launcher per-rank ones) not identical on all reporting ranks."""
    if len(report.ranks) < 2:
        return []
    names: set[str] = set()
    for facts in report.ranks:
        names.update(facts.env)
    rows = []
    for name in sorted(names - PER_RANK_VARIABLES):
        holders: dict[str, list[int]] = defaultdict(list)
        hosts: dict[str, set[str]] = defaultdict(set)
        for facts in report.ranks:
            value = facts.env.get(name, UNSET)
            holders[value].append(facts.rank)
            hosts[value].add(facts.host)
        if len(holders) < 2:
            continue
        ordered = sorted(holders, key=lambda v: (-len(holders[v]), v))
        values = [
            DriftValue(v, len(holders[v]), rank_ranges(holders[v]), compress_hostlist(sorted(hosts[v])))
            for v in ordered[:max_values]
        ]
        rows.append(DriftRow(name, values, len(holders)))
    # A variable that only a few ranks disagree on is the likely fault: fewest dissenters first.
    rows.sort(key=lambda row: (-row.values[0].count, row.variable))
    return rows
