"""Step 2: each rank gathers what it can see locally, every gatherer under a deadline.

A gatherer fills one section of RankFacts. One that raises or overruns is recorded in
`gather_errors`, so the checks that need its section become could-not-run, never a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from preflight.lib.deadline import call_with_deadline
from preflight.model import RankFacts, World
from preflight.steps.gather import (
    env_vars,
    gpus,
    interfaces,
    links,
    master_addr,
    master_port,
    system_limits,
    versions,
)


@dataclass
class GatherOptions:
    """What the gatherers may need from the run options."""

    timeout_s: float = 5.0
    sysfs_root: str = "/sys"
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
]


def gather_facts(world: World, options: GatherOptions, gatherers: Sequence[tuple[str, Gatherer]] = ()) -> RankFacts:
    """Run every gatherer on this rank, each bounded by options.timeout_s."""
    facts = RankFacts(rank=world.rank, host=world.host, world=world)
    for name, gatherer in gatherers or GATHERERS:
        outcome = call_with_deadline(gatherer, options.timeout_s, facts, options)
        if not outcome.ok:
            facts.gather_errors[name] = outcome.reason(options.timeout_s)
    return facts
