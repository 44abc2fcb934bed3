"""Step 2: each rank gathers what it can see locally, every gatherer under a deadline.

A gatherer fills one section of RankFacts. One that raises or overruns is recorded in
`gather_errors`, so the checks that need its section become could-not-run, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from msgspec import Struct, field

from preflight.checks.run_findings import gatherer_failed
from preflight.lib.deadline import call_with_deadline
from preflight.lib.settle import SETTLE_GRACE_S
from preflight.model import Finding, RankFacts, World
from preflight.options import CLOCK_SKEW_S
from preflight.steps.gather import (
    affinity,
    build,
    clock,
    env_vars,
    gpu_health,
    gpus,
    interfaces,
    links,
    master_addr,
    master_port,
    nic_health,
    system_limits,
    versions,
)


class GatherOptions(Struct):
    """What the gatherers may need from the run options."""

    timeout_s: float = 5.0
    sysfs_root: str = "/sys"
    fingerprint: list[str] = field(default_factory=list)  # --fingerprint: more distributions (gather/build.py)
    clock_skew_s: float = CLOCK_SKEW_S  # --expect clock_skew: carried in the facts for CLK001
    # how long a transient fabric state or training link is read again before it is judged (lib/settle.py)
    settle_grace_s: float = SETTLE_GRACE_S
    extra: dict[str, object] = field(default_factory=dict)


Gatherer = Callable[[RankFacts, GatherOptions], None]

GATHERERS: list[tuple[str, Gatherer]] = [
    ("env", env_vars.gather),
    ("versions", versions.gather),
    ("system", system_limits.gather),
    ("interfaces", interfaces.gather),
    ("rendezvous", master_addr.gather),
    ("gpus", gpus.gather),
    ("network", links.gather),  # after "interfaces": reads its list, replaces ib_devices with ports
    ("ports", master_port.gather),
    ("gpu health", gpu_health.gather),  # the bound GPU, through nvml_source.py
    ("nic health", nic_health.gather),  # after "network": reads its ib_ports
    ("build", build.gather),
    ("clock", clock.gather),
    ("affinity", affinity.gather),  # after "gpus", "gpu health" (the bound GPU) and "network"
]


def gather_facts(world: World, options: GatherOptions, gatherers: Sequence[tuple[str, Gatherer]] = ()) -> RankFacts:
    """Run every gatherer on this rank, each bounded by options.timeout_s."""
    facts = RankFacts(rank=world.rank, host=world.host, world=world)
    for name, gatherer in gatherers or GATHERERS:
        outcome = call_with_deadline(gatherer, options.timeout_s, facts, options)
        if not outcome.ok:
            facts.gather_errors[name] = outcome.reason(options.timeout_s)
    return facts


def gather_failures(all_facts: Sequence[RankFacts]) -> list[Finding]:
    """One RUN005 finding per gatherer that failed somewhere, naming every rank and host it failed on."""
    grouped: dict[str, tuple[str, list[int], list[str]]] = {}
    for facts in all_facts:
        for name, reason in facts.gather_errors.items():
            entry = grouped.setdefault(name, (reason, [], []))
            entry[1].append(facts.rank)
            entry[2].append(facts.host)
    return [finding for name, (reason, ranks, hosts) in grouped.items()
            for finding in gatherer_failed.report(name=name, reason=reason, ranks=ranks, hosts=hosts)]
