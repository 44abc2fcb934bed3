"""After the probes: each host reads its RDMA ports' error counters again; rank 0 compares.

The first read is part of the facts (steps/gather/nic_health.py). After step 8 (whether the
probes ran, were skipped or were refused), one rank per host (the first to claim the host in
the store) reads the same ports' counters again and publishes them under `nic_after/<host>`;
rank 0, building the verdict, waits for the hosts that had counters (at most
`--check-timeout`) and reports every increase as NIC001, naming host, device and port. A host
whose second read does not arrive in time is left out: nothing is claimed about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from preflight.checks.nic_health import nic_counters_increased
from preflight.lib.waiting import wait_until
from preflight.model import Finding, IbCounters, RankFacts
from preflight.model.codec import BadPayload, decode, encode
from preflight.model.health_facts import port_key
from preflight.steps.gather.nic_health import read_counters

_MAX_BYTES = 1 << 20


def _ports(facts: RankFacts) -> list[Any]:
    chosen = {(c.device, str(c.port)) for c in facts.health.ib_counters}
    return [p for p in facts.network.ib_ports if (p.device, str(p.port)) in chosen]


def publish_after(store: Any, facts: RankFacts, sysfs_root: str) -> None:
    """Read this host's counters again and publish them, if this rank is the first of its host to claim it."""
    if store is None or not facts.health.ib_counters:
        return
    try:
        if store.add(f"nic_after_claim/{facts.host}", 1) == 1:
            store.set(f"nic_after/{facts.host}", encode(read_counters(sysfs_root, _ports(facts))))
    except (RuntimeError, OSError):  # the store is gone (rank 0 left): the verdict path reports that
        pass


def increases(before: Sequence[IbCounters], after: Sequence[IbCounters]) -> list[dict[str, Any]]:
    """Per port, the counters that grew between two reads: [{"port": "mlx5_0/1", "counters": {name: delta}}]."""
    earlier = {(c.device, str(c.port)): c.counters for c in before}
    found = []
    for entry in after:
        old = earlier.get((entry.device, str(entry.port)), {})
        grown = {name: value - old[name] for name, value in entry.counters.items()
                 if name in old and value > old[name]}
        if grown:
            found.append({"port": port_key(entry.device, entry.port), "counters": grown})
    return found


def lead(store: Any, own: RankFacts, all_facts: Sequence[RankFacts], sysfs_root: str,
         timeout_s: float) -> list[Finding]:
    """Rank 0: publish its own host's second read, wait for the others', report every increase (NIC001)."""
    if store is None:
        return []
    publish_after(store, own, sysfs_root)
    first: dict[str, RankFacts] = {}
    ranks: dict[str, list[int]] = {}
    for facts in sorted(all_facts, key=lambda f: f.rank):
        if facts.health.ib_counters:
            first.setdefault(facts.host, facts)
            ranks.setdefault(facts.host, []).append(facts.rank)
    if not first:
        return []
    keys = [f"nic_after/{host}" for host in first]
    findings: list[Finding] = []
    try:
        wait_until(lambda: store.check(keys), timeout_s)
        arrived = {host: store.get(f"nic_after/{host}") for host in first if store.check([f"nic_after/{host}"])}
    except (RuntimeError, OSError):
        return findings
    for host, facts in sorted(first.items()):
        try:
            after = decode(arrived[host], list[IbCounters], max_bytes=_MAX_BYTES)
        except (KeyError, BadPayload):
            continue
        grown = increases(facts.health.ib_counters, after)
        if grown:
            findings += nic_counters_increased.report(host=host, ranks=ranks[host], increases=grown)
    return findings
