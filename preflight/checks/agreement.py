"""Do all ranks belong to the same job? Launcher, job id, MASTER_ADDR's address, restarts.

RANK003 (checks/rank_roster.py) already compares WORLD_SIZE, MASTER_ADDR and MASTER_PORT as text;
these checks add what it does not: the launcher and job id, and what MASTER_ADDR *resolves*
to on each rank.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from preflight.lib.grouping import all_alike, describe, distinct_networks, group_by, minority, short
from preflight.model import MasterAddrResolution, RankFacts, Severity
from preflight.model.rank_env import RankEnv
from preflight.registry import CROSS, JobView, Problem, Tags, check

_JOB_FIELDS = ("launcher", "job_id")
_RESTART_VARIABLES = _SLURM_RESTARTS, _ELASTIC_RESTARTS = ("SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT")


@check(
    "ENV001",
    tag=Tags.ENV,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Start every rank from the same job step with the same launcher; a rank with another "
    "job id or launcher is a stray process (an old step, another job sharing the port).",
)
def job_disagreement(job: JobView) -> Iterable[Problem]:
    """All ranks must report the same launcher and job id.

    Ranks that were detected as different launchers (torchrun on one node, plain env:// on
    another) read their rank and world size from different variables, and a different job id
    means a process of another job reached this job's rendezvous. Either way the training's
    process group would mix processes that do not belong together.
    """
    ranks = job.ranks
    if all_alike(ranks, operator.attrgetter(*(f"world.{name}" for name in _JOB_FIELDS))):
        return  # one pass for both (every healthy job)
    for field_name in _JOB_FIELDS:
        if all_alike(ranks, operator.attrgetter(f"world.{field_name}")):
            continue
        groups = group_by(ranks, lambda f, name=field_name: str(getattr(f.world, name)))
        if len(groups) < 2:
            continue
        odd = minority(groups)
        yield Problem(
            f"ranks disagree on {field_name}: {describe(groups, ranks, lambda v: short(v) if v else 'empty')}",
            ranks=[f.rank for f in odd],
            hosts=[f.host for f in odd],
            data={"field": field_name},
        )


def _resolved(facts: RankFacts) -> str:
    return _resolution(facts.network.master_addr)


def _resolution(entry: MasterAddrResolution | None) -> str:
    """What MASTER_ADDR resolved to, as ENV002 compares it: the addresses, `unresolvable`, or "" (not read)."""
    if entry is None:
        return ""
    if entry.error:
        return "unresolvable"
    return ",".join(entry.ips)


@check(
    "ENV002",
    tag=Tags.ENV,
    scope=CROSS,
    severity=Severity.ERROR,
    hint="Make MASTER_ADDR resolve to the same address everywhere (fix /etc/hosts or DNS on the odd "
    "hosts), or set MASTER_ADDR to the address itself.",
)
def master_addr_resolution(job: JobView) -> Iterable[Problem]:
    """MASTER_ADDR must resolve to the same address on every rank.

    The same host name can resolve differently per host: a stale /etc/hosts entry, split DNS,
    a name that maps to 127.0.1.1 on the master itself. Ranks then rendezvous at different
    endpoints, or the master's own process group binds an address nobody else can reach.
    Ranks whose MASTER_ADDR text differs are RANK003's finding; this compares the addresses.
    """
    ranks = job.ranks
    resolved: dict[str, set[str]] = defaultdict(set)  # each name's addresses, a host's network section read once
    for network in distinct_networks(ranks):
        if network.master_addr:
            resolved[network.master_addr.addr].add(_resolution(network.master_addr))
    if all(len(found) < 2 for found in resolved.values()):
        return  # every name resolved alike everywhere (every healthy job): no rank grouped
    known = [f for f in ranks if f.network.master_addr]
    by_text = group_by(known, lambda f: f.network.master_addr.addr if f.network.master_addr else "")
    for addr, same_text in by_text.items():
        groups = group_by(same_text, _resolved)
        if len(groups) < 2:
            continue
        odd = minority(groups)
        yield Problem(
            f"MASTER_ADDR {addr} resolves differently: "
            f"{describe(groups, same_text, lambda v: short(v) if v != 'unresolvable' else 'unresolvable')}",
            ranks=[f.rank for f in odd],
            hosts=[f.host for f in odd],
            data={"master_addr": addr},
        )


def restart_count(facts: RankFacts) -> int:
    """The largest restart counter this rank knows of (world or environment)."""
    return max(facts.world.restart_count, _counted_in(facts.env))


def _counted_in(env: Mapping[str, str]) -> int:
    """The largest of the restart variables' counts in an environment (0: none, or none a number)."""
    counts = [0]
    for name in _RESTART_VARIABLES:
        value = env.get(name, "").strip()
        if value.isdigit():
            counts.append(int(value))
    return max(counts)


def restart_counts(ranks: Sequence[RankFacts]) -> list[int]:
    """Each rank's restart_count, in one pass: a RankEnv's shared part (model/rank_env.py) is read once per
    shared dict, and per rank only its World's counter and whether its own variables hold one (131,072
    ranks: 75 -> 25 ms)."""
    counts: list[int] = []
    append = counts.append
    last_shared: object = None
    from_shared = 0
    for facts in ranks:
        env = facts.env
        if type(env) is RankEnv and _SLURM_RESTARTS not in env.own and _ELASTIC_RESTARTS not in env.own:
            if env.shared is not last_shared:
                last_shared, from_shared = env.shared, _counted_in(env.shared)
            append(max(facts.world.restart_count, from_shared))
        else:
            append(restart_count(facts))
    return counts


@check(
    "ENV005",
    tag=Tags.ENV,
    scope=CROSS,
    severity=Severity.INFO,
    hint="This run is a requeue or elastic restart: look at the previous attempt's logs for why "
    "it ended before trusting this one.",
)
def restarted(job: JobView) -> Iterable[Problem]:
    """SLURM_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT is above 0.

    The job was requeued by Slurm or restarted by torchrun's elastic agent: something ended the
    previous attempt (a node failure, a hang killed by a timeout, OOM). The report's header
    shows the restart number too.
    """
    ranks = job.ranks
    counts = restart_counts(ranks)
    highest = max(counts, default=0)
    if highest > 0:
        restarted_ranks = [f for f, count in zip(ranks, counts, strict=True) if count > 0]
        yield Problem(
            f"this run is restart #{highest} (SLURM_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT)",
            ranks=[f.rank for f in restarted_ranks],
            hosts=[f.host for f in restarted_ranks],
            data={"restart_count": highest},
        )
