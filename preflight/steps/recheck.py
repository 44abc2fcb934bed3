"""After the probes: each host reads its RDMA ports' error counters again, each rank drains its
GPU's XID events; rank 0 compares and reports.

XID events: a rank whose facts opened an XID watch on its bound GPU (steps/gather/gpu_health.py,
`health.xid_watch == "watching"`) drains and closes it here and publishes the XIDs under
`xid_after/<rank>`; rank 0 waits for those ranks (the same bound) and reports any as GPU040.

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

from preflight.channel import keys
from preflight.channel.board import BadValue, Board
from preflight.channel.keys import Key
from preflight.checks.gpu_health import xid_events
from preflight.checks.nic_health import nic_counters_increased
from preflight.lib.deadline import call_with_deadline
from preflight.lib.waiting import wait_until
from preflight.model import Finding, IbCounters, RankFacts
from preflight.model.health_facts import port_key
from preflight.options import RunOptions
from preflight.registry import Tags
from preflight.steps.gather.gpu_health import take_xid_watch
from preflight.steps.gather.nic_health import read_counters


def _ports(facts: RankFacts) -> list[Any]:
    chosen = {(c.device, str(c.port)) for c in facts.health.ib_counters}
    return [p for p in facts.network.ib_ports if (p.device, str(p.port)) in chosen]


def publish_after(store: Any, facts: RankFacts, sysfs_root: str, timeout_s: float = 10.0) -> None:
    """This rank's XIDs since the facts, and its host's counters read again (by the host's first claimant).

    The drain calls NVML, so it runs under `timeout_s` like every NVML call; one that overruns
    publishes nothing for XIDs (rank 0 then claims nothing about them)."""
    watch = take_xid_watch(facts.rank)
    xids: list[int] | None = []
    if watch is not None:
        drained = call_with_deadline(watch.drain, timeout_s)
        xids = drained.value if drained.ok else None
        if drained.ok:
            watch.close()
    if store is None:
        return
    board = Board(store)
    try:
        if facts.health.xid_watch == "watching" and xids is not None:
            board.put(keys.XID_AFTER.at(facts.rank), xids)
        if facts.health.ib_counters and board.count(keys.NIC_AFTER_CLAIM.at(facts.host)) == 1:
            board.put(keys.NIC_AFTER.at(facts.host), read_counters(sysfs_root, _ports(facts)))
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


def lead(store: Any, own: RankFacts, all_facts: Sequence[RankFacts], options: RunOptions) -> list[Finding]:
    """Rank 0: publish its own second reads, wait for the others', report XIDs (GPU040) and increases (NIC001).

    Each only while its tag (gpu, nic) is selected by --only / --skip."""
    publish_after(store, own, options.sysfs_root, options.timeouts.check_s)
    if store is None:
        return []
    findings: list[Finding] = []
    if _selected(options, Tags.GPU):
        findings += _xid_findings(store, all_facts, options.timeouts.check_s)
    if _selected(options, Tags.NIC):
        findings += _counter_findings(store, all_facts, options.timeouts.check_s)
    return findings


def _selected(options: RunOptions, tag: str) -> bool:
    return tag not in options.skip and (not options.only or tag in options.only)


def _arrived(store: Any, wanted: list[Key[Any]], timeout_s: float) -> dict[str, Any]:
    """The values of `wanted` (keys of one row) that are in the store within timeout_s (all of them, or
    what came), decoded as the row's type; one that does not decode is left out (rank 0 then claims
    nothing about it)."""
    board = Board(store)
    try:
        wait_until(lambda: board.has_all(wanted), timeout_s)
        values = board.fetch(wanted, [-1] * len(wanted))
    except (RuntimeError, OSError):
        return {}
    return {key: value for key, value in zip(wanted, values, strict=True) if value is not None
            and not isinstance(value, BadValue)}


def _xid_findings(store: Any, all_facts: Sequence[RankFacts], timeout_s: float) -> list[Finding]:
    watching = [f for f in all_facts if f.health.xid_watch == "watching" and f.health.gpus]
    arrived = _arrived(store, [keys.XID_AFTER.at(f.rank) for f in watching], timeout_s) if watching else {}
    findings: list[Finding] = []
    for facts in sorted(watching, key=lambda f: f.rank):
        xids = arrived.get(keys.XID_AFTER.at(facts.rank))
        if xids is None:
            continue
        if xids:
            findings += xid_events.report(rank=facts.rank, host=facts.host, gpu_index=facts.health.gpus[0].index,
                                          xids=xids[:256])
    return findings


def _counter_findings(store: Any, all_facts: Sequence[RankFacts], timeout_s: float) -> list[Finding]:
    first: dict[str, RankFacts] = {}
    ranks: dict[str, list[int]] = {}
    for facts in sorted(all_facts, key=lambda f: f.rank):
        if facts.health.ib_counters:
            first.setdefault(facts.host, facts)
            ranks.setdefault(facts.host, []).append(facts.rank)
    if not first:
        return []
    arrived = _arrived(store, [keys.NIC_AFTER.at(host) for host in first], timeout_s)
    findings: list[Finding] = []
    for host, facts in sorted(first.items()):
        after = arrived.get(keys.NIC_AFTER.at(host))
        if after is None:
            continue
        grown = increases(facts.health.ib_counters, after)
        if grown:
            findings += nic_counters_increased.report(host=host, ranks=ranks[host], increases=grown)
    return findings
