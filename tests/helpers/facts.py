"""Hand-written RankFacts for unit tests of checks, and a way to run one check on them.

Sections may be given as plain dicts (the JSON shape of the typed section); they are decoded
through the model's own codec, so a test's data is held to the same types as a peer's payload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from preflight.model import (
    Finding,
    GpuFacts,
    HealthFacts,
    JobReport,
    NetworkFacts,
    ProbeResult,
    RankFacts,
    SystemLimits,
    Versions,
    World,
)
from preflight.model.codec import from_builtins
from preflight.model.placement_facts import PlacementFacts
from preflight.options import RunOptions
from preflight.probes.orchestrate import ProbeOutcome
from preflight.registry import CheckContext, JobView, get_check
from preflight.steps.verdict import RunRecord, build_report

_SECTIONS = {"versions": Versions, "system": SystemLimits, "network": NetworkFacts, "gpus": list[GpuFacts],
             "health": HealthFacts, "placement": PlacementFacts}


def rank_facts(rank: int, host: str = "node01", *, env: dict[str, str] | None = None, world_size: int = 1,
               local_rank: int | None = None, local_world_size: int = 1, **sections: Any) -> RankFacts:
    """One rank's facts; `sections` fills versions / system / network / gpus / health; world fields via world_*."""
    world_fields = {k[len("world_"):]: sections.pop(k) for k in list(sections) if k.startswith("world_")}
    world = World(launcher=world_fields.pop("launcher", "env"), rank=rank, world_size=world_size,
                  local_rank=rank % local_world_size if local_rank is None else local_rank,
                  local_world_size=local_world_size, host=host, **world_fields)
    typed = {name: from_builtins(value, _SECTIONS[name]) if name in _SECTIONS else value
             for name, value in sections.items()}
    return RankFacts(rank=rank, host=host, world=world, env=dict(env or {}), **typed)


def cluster(hosts: int, per_host: int, **kwargs: Any) -> list[RankFacts]:
    """hosts x per_host ranks in block layout on node001.. with identical (not shared) facts."""
    size = hosts * per_host
    return [rank_facts(r, f"node{r // per_host + 1:03d}", world_size=size, local_world_size=per_host, **kwargs)
            for r in range(size)]


def run(check_id: str, subject: RankFacts | Sequence[RankFacts], **context: Any) -> list[Finding]:
    """The findings one registered check gives: a local check on one rank's facts, a cross check on
    a list of them (as a JobView); `context` sets CheckContext / JobView fields."""
    spec = get_check(check_id)
    assert spec is not None, check_id
    if isinstance(subject, (list, tuple)):
        job = JobView(world_size=context.pop("world_size", len(subject)), ranks=list(subject), **context)
        return [spec.finding(problem) for problem in spec.func(job)]
    ctx = CheckContext(world_size=context.pop("world_size", 1), **context)
    return [spec.finding(problem) for problem in spec.func(subject, ctx)]


def host_facts(hosts: Sequence[str], per_host: int = 1, node_rank_given: bool = False) -> list[RankFacts]:
    """per_host ranks on each of `hosts` in block layout, node rank = the host's index (named by the
    launcher when node_rank_given: then hosts of one name are still several nodes)."""
    size = len(hosts) * per_host
    return [rank_facts(r, hosts[r // per_host], world_size=size, local_world_size=per_host,
                       world_node_rank=r // per_host, world_node_rank_given=node_rank_given)
            for r in range(size)]


def built_report(facts: Sequence[RankFacts], findings: Sequence[Finding] = (), probes: Sequence[ProbeResult] = (),
                 missing: Sequence[int] = ()) -> JobReport:
    """The JobReport the verdict step (build_report) makes of these ranks' facts, findings and probe
    results, as rank 0 of a Slurm job would."""
    record = RunRecord(World(launcher="slurm", rank=0, world_size=len(facts) + len(missing), host=facts[0].host),
                       RunOptions().for_world(len(facts) + len(missing)))
    record.facts, record.all_facts = facts[0], list(facts)
    record.findings = list(findings)
    record.missing = list(missing)
    if probes:
        record.probes = ProbeOutcome(results=list(probes))
    return build_report(record)
