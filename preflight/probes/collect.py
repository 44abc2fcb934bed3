"""Rank 0: gather every rank's measurements from the store, and find who stopped a hung step.

Nothing here touches a communicator: after a hang the store is the only channel trusted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from msgspec import Struct, field

from preflight.channel import keys
from preflight.channel.board import BadValue, Board
from preflight.lib.waiting import wait_until
from preflight.model import ProbeDevice, ProbeResult
from preflight.model.messages import BoundRecord, ProbeReport, Status, StepRecord
from preflight.model.probe_faults import Hang
from preflight.probes import ops
from preflight.probes.plan import CONNECT

# Ranks of one step start it within a barrier of each other, so they reach its deadline within
# about this long of the first rank that did.
EARLY_GRACE_S = 2.0
# Phases that point at the hung group: inside its collective, or creating its communicators.
GROUP_PHASES = ("op", "connect")


class Gathered(Struct):
    """Every rank's payload that arrived, keyed by rank."""

    payloads: dict[int, ProbeReport] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)  # last step each rank started
    bound: dict[int, BoundRecord] = field(default_factory=dict)  # what each rank's session bound
    dead: dict[int, str] = field(default_factory=dict)  # ranks whose heartbeat stopped (probes/liveness.py)
    bad: dict[int, BadValue] = field(default_factory=dict)  # values that did not decode: rank 0 reports them

    def hosts(self) -> dict[int, str]:
        """Rank -> host, for the ranks that reported."""
        return {rank: p.host for rank, p in self.payloads.items()}

    def devices(self) -> list[ProbeDevice]:
        """Per rank that opened its session: the backend used and the GPU bound (`dev/<rank>`), for the report."""
        out = []
        for rank, entry in sorted(self.bound.items()):
            device = entry.device
            out.append(ProbeDevice(rank, entry.host, entry.backend, device.index if device else None,
                                   device.name if device else "", device.pci_bus_id if device else "",
                                   device.uuid if device else ""))
        return out

    def device_ids(self) -> dict[int, str]:
        """Rank -> its GPU's PCI bus id (else UUID), for nominal.annotate's `devices`."""
        return {d.rank: d.pci_bus_id or d.uuid for d in self.devices() if d.pci_bus_id or d.uuid}

    def stopped(self) -> dict[int, Status]:
        """Ranks whose probing ended in a timeout or a failure: rank -> status."""
        return {r: p.status for r, p in self.payloads.items() if p.status.state != "done"}

    def take(self, rank: int, value: object, into: dict) -> None:
        """Keep a value a rank sent: decoded into `into`, or a bad value (rank 0 reports it)."""
        if isinstance(value, BadValue):
            self.bad.setdefault(rank, value)
        elif value is not None:
            into[rank] = value


def gather(board: Board, world_size: int, timeout_s: float, *, early: bool = False,
           dead: Callable[[], dict[int, str]] | None = None) -> Gathered:
    """Wait for every rank's `res/<rank>` until the deadline.

    early: rank 0 itself already stopped on a hang; the others stop within about the same
    deadline, so a short wait (EARLY_GRACE_S) is enough and a rank that never answers is
    named by position. Otherwise the wait is cut short the same way once any rank has
    reported that it stopped. dead: the ranks known dead (their heartbeat stopped): nobody
    waits for them.
    """
    got = Gathered()
    grace_until: float | None = time.monotonic() + EARLY_GRACE_S if early else None

    def settled() -> bool:
        nonlocal grace_until
        awaited = [r for r in range(world_size) if r not in got.payloads and r not in got.bad]
        for rank, value in zip(awaited, board.fetch([keys.RESULT.at(r) for r in awaited], awaited),
                               strict=True):
            got.take(rank, value, got.payloads)
        if len(got.payloads) + len(got.bad) == world_size:
            return True
        if dead is not None:
            got.dead = {r: why for r, why in dead().items() if r not in got.payloads}
            if got.dead and len(got.payloads) + len(got.bad) + len(got.dead) == world_size:
                return True  # every living rank answered
        if grace_until is None and got.stopped():
            grace_until = time.monotonic() + EARLY_GRACE_S  # another rank stopped: the rest follow
        return grace_until is not None and time.monotonic() >= grace_until

    wait_until(settled, timeout_s)
    ranks = list(range(world_size))
    for rank, value in zip(ranks, board.fetch([keys.POSITION.at(r) for r in ranks], ranks), strict=True):
        got.take(rank, value, got.positions)
    for rank, value in zip(ranks, board.fetch([keys.BOUND.at(r) for r in ranks], ranks), strict=True):
        got.take(rank, value, got.bound)
    return got


def diagnose_hang(got: Gathered, steps: list[tuple[str, str, int]], groups: dict[str, list[list[int]]],
                  world_size: int) -> Hang | None:
    """The earliest step where a rank stopped, and the ranks that were elsewhere."""
    stopped = got.stopped()
    if not stopped and len(got.payloads) == world_size:
        return None
    if not stopped:  # some ranks never reported at all
        missing = [r for r in range(world_size) if r not in got.payloads]
        return Hang("", "", 0, -1, missing, step=-1, waiting=[],
                    culprits={r: f"died ({got.dead[r]})" if r in got.dead else "sent no probe results"
                              for r in missing}, phase="", elapsed_s=0.0)
    first_step = min(s.step for s in stopped.values())
    dim, op, size = steps[first_step]
    stuck = sorted(r for r, s in stopped.items() if s.step == first_step)
    # A rank inside the collective (or creating its communicators) points at the hung group;
    # ranks at a barrier only waited. A rank whose step raised unexpectedly could not run it.
    in_op = [r for r in stuck if stopped[r].phase in GROUP_PHASES]
    errors = [r for r in stuck if stopped[r].state == "error"]
    status = stopped[(errors or in_op or stuck)[0]]
    if in_op:
        group_index, members = next((i, g) for i, g in enumerate(groups[dim]) if in_op[0] in g)
    else:
        group_index, members = -1, list(range(world_size))
    culprits: dict[int, str] = {r: f"could not run the step ({stopped[r].reason})"
                                for r in errors if r in members}
    for rank in members:
        if rank in culprits:
            continue
        where = _where(rank, got, first_step, bool(in_op), connecting=op == CONNECT)
        if where:
            culprits[rank] = where
    waiting = [r for r in members if r in stuck and r not in culprits]
    if not culprits and status.phase in GROUP_PHASES:
        what = "its communicators" if status.phase == "connect" else "the rest of its group"
        culprits = {r: f"stuck with {what} (link or peer hang)" for r in members}
    return Hang(dim, op, size, group_index, members, step=first_step, waiting=waiting, culprits=culprits,
                phase=status.phase, elapsed_s=status.elapsed_s,
                failed=status.state in ("failed", "error"), reason=status.reason,
                could_not_run=bool(errors))


def _where(rank: int, got: Gathered, step: int, in_op: bool, *, connecting: bool = False) -> str:
    """Why a rank was not waiting in `step` with its peers; empty when it was.

    connecting: the step only creates its group's communicators. A rank that reached it and sent
    nothing is then most likely inside that creation: ncclCommInitRank (NCCL creates a group's
    communicators at its first op) blocks the calling thread, so the rank's own deadline cannot
    fire and it cannot say where it is until the call returns.
    """
    payload = got.payloads.get(rank)
    position = got.positions.get(rank)
    if payload is not None:
        status = payload.status
        if status.state == "done" or status.step > step:
            return "moved past this step without completing it with its group (skipped or returned early)"
        if status.step < step:
            return f"was still stuck in an earlier step ({status.step})"
        if status.phase == "barrier" and in_op:
            return "left the collective without completing it with its group (skipped or returned early)"
        return ""
    if rank in got.dead:
        return f"died (no results; {got.dead[rank]})"
    if position is None or position < step:
        return "never reached this step (no results; last seen at step "\
               f"{position if position is not None else 'none'})"
    if position > step:
        return "moved past this step without completing it with its group (skipped or returned early)"
    if connecting:
        return "sent no results while creating its communicators (stuck in that call, or crashed)"
    return "sent no results (crashed or hung outside the collective)"


def results(got: Gathered, hosts: dict[int, str]) -> list[ProbeResult]:
    """One ProbeResult per (step, group): a rank's time is its median iteration, the group's its slowest rank's.

    The median keeps one preempted iteration on a shared CPU from deciding the figure; the
    per-iteration figures are kept too (iter_busbw_gbps), for the straggler rule's spread.
    """
    by_group: dict[tuple[int, int], dict[int, StepRecord]] = {}
    for rank, payload in got.payloads.items():
        for record in payload.records:
            if rank in record.ranks and record.times_s:  # a rank speaks for its own measurements only
                by_group.setdefault((record.step, record.group_index), {})[rank] = record
    out = []
    for (_, group_index), records in sorted(by_group.items()):
        first = next(iter(records.values()))
        ranks = first.ranks
        if len(records) < len(ranks) or not ops.known(first.op):
            continue  # a member stopped before finishing: no figure for this group
        rank_times = {rank: statistics.median(r.times_s) for rank, r in sorted(records.items())}
        time_s = max(rank_times.values())
        op, size, n = first.op, first.size_bytes, len(ranks)
        out.append(ProbeResult(
            dim=first.dim, op=first.op, size_bytes=first.size_bytes, group_index=group_index,
            ranks=ranks, hosts=[hosts.get(r, "") for r in ranks], time_s=time_s,
            algbw_gbps=ops.algbw_gbps(first.size_bytes, time_s),
            busbw_gbps=ops.busbw_gbps(first.op, len(ranks), first.size_bytes, time_s),
            rank_times_s=rank_times, verified=all(r.output_ok for r in records.values()),
            wrong_ranks=sorted(rank for rank, r in records.items() if not r.output_ok),
            bad_sources=sorted({s for r in records.values() for s in r.bad_sources}),
            iter_busbw_gbps=[ops.busbw_gbps(op, n, size, t) for t in iteration_times(records)],
        ))
    return out


def iteration_times(records: dict[int, StepRecord]) -> list[float]:
    """The group's time of each timed iteration: its slowest rank's (a collective ends with its last rank)."""
    lists = [r.times_s for r in records.values() if r.times_s]
    if not lists:
        return []
    return [max(times[i] for times in lists) for i in range(min(len(t) for t in lists))]
