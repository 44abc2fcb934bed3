"""Layout checks over all ranks: is every rank there once, and do they agree on the world?"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence

from preflight.lib.grouping import all_alike, group_by
from preflight.lib.hostlist import host_ranges, rank_ranges
from preflight.model import RankFacts, Severity
from preflight.registry import CROSS, JobView, Problem, Tags, check


def _expected_hosts(missing: Sequence[int], ranks: Sequence[RankFacts]) -> dict[int, str]:
    """Where the launcher says each missing rank should run: Slurm's layout (rank 0 derives it
    from the launcher's variables; other ranks do not ship it), else torchrun's node rank.

    O(N + missing): the layouts and node blocks are indexed once, not searched per missing rank."""
    layout: dict[int, str] = {}
    for facts in ranks:
        for rank, host in facts.world.expected_hosts.items():
            layout.setdefault(rank, host)
    if all(layout.get(rank) for rank in missing):  # Slurm: rank 0's layout places every rank
        return {rank: layout[rank] for rank in missing}
    blocks: dict[tuple[int, int], tuple[int, str]] = {}  # (local size, node block) -> (first index, host)
    for index, facts in enumerate(ranks):
        local = facts.world.local_world_size
        if local > 0 and facts.world.num_nodes > 1:
            blocks.setdefault((local, facts.world.rank // local), (index, facts.host))
    sizes = {local for local, _ in blocks}
    found = {}
    for rank in missing:
        if layout.get(rank):
            found[rank] = layout[rank]
            continue
        candidates = [blocks[(local, rank // local)] for local in sizes if (local, rank // local) in blocks]
        if candidates:
            found[rank] = min(candidates)[1]
    return found


@check(
    "RANK001",
    tag=Tags.WORLD,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Look at the missing rank's host: did its process start (launcher log), crash at import, "
    "or fail to reach MASTER_ADDR:MASTER_PORT? Exclude the host and resubmit if it is unhealthy.",
    blames_host=True,
)
def missing_ranks(job: JobView) -> Iterable[Problem]:
    """Every rank 0..WORLD_SIZE-1 must report to rank 0 within --timeout.

    A rank that never reports is a process that did not start, crashed, hung, or cannot reach
    the rendezvous address. The training would hang at its first collective waiting for it.
    Where the launcher says where the rank should run (Slurm's nodelist and task layout, or
    a torchrun node whose other ranks did report), the finding names that host.
    """
    # A rank claimed twice is RANK002's, one that died after joining RUN008's: not "did not report".
    present = {facts.rank for facts in job.ranks} | set(job.duplicate_ranks) | set(job.dead_ranks)
    missing = [rank for rank in range(job.world_size) if rank not in present]
    if not missing:
        return
    expected = _expected_hosts(missing, job.ranks)
    hosts = sorted(set(expected.values()))
    if len(missing) == 1:
        where = f" (expected on {hosts[0]})" if hosts else ""
        message = f"rank {missing[0]} did not report within the deadline{where}"
    else:
        where = f" (expected on {len(hosts)} host(s): {host_ranges(hosts)})" if hosts else ""
        message = f"{len(missing)} ranks did not report within the deadline: ranks {rank_ranges(missing)}{where}"
    # One finding, however many ranks are missing: its ranks and hosts name them all.
    yield Problem(message, ranks=missing, hosts=hosts, data={"missing": len(missing)})


@check(
    "RANK002",
    tag=Tags.WORLD,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Two processes claim the same RANK: check the launcher's per-process variables "
    "(a RANK exported in the batch script is the same on every task).",
)
def duplicate_ranks(job: JobView) -> Iterable[Problem]:
    """Each rank number must be held by exactly one process.

    Duplicates come from exporting RANK in a job script (every task inherits the same value)
    or from two launches sharing one MASTER_PORT.
    """
    # Every process claims its rank in the store (preflight/channel/roster.py); rank 0 counts
    # neither claimant of a rank claimed twice (it cannot tell which is its job's own).
    for rank, claimants in sorted(job.duplicate_ranks.items()):
        who = ", ".join(f"{host} pid {pid}" for host, pid in claimants[:8]) or "processes not named in time"
        yield Problem(f"rank {rank} was claimed by {max(2, len(claimants))} processes ({who}): two jobs share "
                      "MASTER_ADDR:MASTER_PORT, or several processes have the same RANK; neither is counted as "
                      f"rank {rank}", ranks=[int(rank)], hosts=sorted({host for host, _ in claimants}))


_AGREED_FIELDS = ("world_size", "master_addr", "master_port")


@check(
    "RANK003",
    tag=Tags.WORLD,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Every rank must be started with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT; "
    "the odd ranks were launched differently (a stale variable, another job's script).",
)
def world_disagreement(job: JobView) -> Iterable[Problem]:
    """All ranks must agree on WORLD_SIZE, MASTER_ADDR and MASTER_PORT.

    Ranks that disagree either wait for a world that never fills or rendezvous with another
    job. The finding names the value most ranks hold and the ranks that hold another one.
    """
    ranks = job.ranks
    if all_alike(ranks, operator.attrgetter(*(f"world.{name}" for name in _AGREED_FIELDS))):
        return  # one pass for the three (every healthy job)
    for field_name in _AGREED_FIELDS:
        if all_alike(ranks, operator.attrgetter(f"world.{field_name}")):
            continue
        holders = group_by(ranks, lambda facts, name=field_name: str(getattr(facts.world, name)))
        if len(holders) < 2:
            continue
        majority = next(iter(holders))  # group_by puts the largest group first
        for value, odd in sorted(holders.items()):
            if value == majority:
                continue
            yield Problem(
                f"{field_name} is {value} on ranks {rank_ranges(f.rank for f in odd)} but {majority} on "
                f"{len(holders[majority])} other rank(s)",
                ranks=[f.rank for f in odd],
                hosts=[f.host for f in odd],
                data={"field": field_name, "value": value, "majority": majority},
            )

