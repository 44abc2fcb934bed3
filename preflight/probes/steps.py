"""One rank's steps of the probe plan, the nccl-tests way: each step one buffer set, checked on its
first call, warmed up, then timed in one loop (probes/timing.py) that every group of the dimension
starts together, after a barrier on the control group.

A step that overruns --probe-timeout stops this rank's probing: it records where it stopped in the
store (its position before each step) and never touches the stuck communicator again; rank 0 works
out from the store who did not take part (probes/collect.py). The session the steps run in, its
device, groups and deadline, is probes/session.py's.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from preflight.channel import keys
from preflight.channel.board import Board
from preflight.lib.errors import one_line
from preflight.model.messages import ProbeReport, Status, StepRecord
from preflight.model.nccl_account import NcclAccount
from preflight.probes import memory_fit, mig, ops
from preflight.probes.plan import CONNECT
from preflight.probes.session import Session
from preflight.probes.timing import ProbeFailed, ProbeTimeout, barrier, timed_loop


def run_steps(session: Session) -> tuple[list[StepRecord], Status]:
    """Every step of the plan on this rank; stops at the first step that overruns, fails or cannot run.

    Any exception inside a step ends this rank's probing with a status naming the op, never a
    crashed rank: ProbeTimeout -> timeout, ProbeFailed/RuntimeError (the backend) -> failed,
    anything else (a TypeError from a torch whose signature differs, ops.OpUnavailable) -> error.
    """
    records: list[StepRecord] = []
    skip: set[int] = set()
    for index, (dim, op, size) in enumerate(session.plan.steps()):
        session.board.put(keys.POSITION.at(session.world.rank), index)
        started = time.monotonic()
        deadline = started + session.timeout_s
        phase = "barrier"
        try:
            if index == 0:  # a rank on a MIG instance: no step on NCCL, on any rank (mig.py)
                session.on_mig = mig.mig_ranks(session, deadline)
                if session.on_mig:
                    return records, Status()
            if index == 0 and session.kind == "cuda":  # the buffers sized against the ranks' free memory
                session.skipped = memory_fit.plan_skips(session, memory_fit.least_free(session, deadline))
                skip = {s.index for s in session.skipped}
            if index in skip:  # every rank skips it alike (memory_fit.py)
                continue
            barrier(session.control, deadline)  # every group of the dimension starts together
            if op == CONNECT:
                phase = "connect"
                _connect(session, dim, deadline)
                continue
            phase = "op"
            records.append(measure(session, index, dim, op, size, deadline))
        except ProbeTimeout as exc:
            where = "connect" if phase == "connect" else exc.phase
            return records, Status("timeout", index, where, str(exc)[:200], time.monotonic() - started)
        except (ProbeFailed, RuntimeError) as exc:
            return records, Status("failed", index, phase, one_line(exc), time.monotonic() - started)
        except Exception as exc:
            return records, Status("error", index, phase, f"{op}: {type(exc).__name__}: {one_line(exc)}",
                                   time.monotonic() - started)
    return records, Status()


def _connect(session: Session, dim: str, deadline: float) -> None:
    """Create dim's communicators under the deadline: one tiny all_reduce on the group, and where
    the plan sends between pipeline stages, one send/recv to each adjacent stage (NCCL creates a
    point-to-point communicator per peer pair at the first send)."""
    group, ranks, _ = session.groups[dim]
    me, n = ranks.index(session.world.rank), len(ranks)
    elem = 2 if session.kind == "cuda" else 4
    pending = [ops.make_buffers("all_reduce", elem, me, n, session.dtype, session.device)]
    if any(d == dim and o == "send_recv" for d, o, _ in session.plan.measured_steps()):
        pending.append(ops.make_buffers("send_recv", elem, me, n, session.dtype, session.device))
    for buffers in pending:
        timed_loop(lambda b=buffers: ops.launch(b, group, ranks, me), 1, deadline, session.device, cuda=session.cuda)


def measure(session: Session, index: int, dim: str, op: str, size: int, deadline: float,
            iters: int | None = None) -> StepRecord:
    """Plan step `index` (dim's op at `size` bytes) on this rank: checked, warmed up, timed over `iters`
    iterations (the plan's by default)."""
    group, ranks, group_index = session.groups[dim]
    me, n = ranks.index(session.world.rank), len(ranks)
    plan, device = session.plan, session.device
    buffers = ops.make_buffers(op, size, me, n, session.dtype, device)

    def start() -> list[Any]:
        return ops.launch(buffers, group, ranks, me)

    # The first call, on the fresh inputs, is the one checked against the known result; then the
    # warm-up and the timed loop run on the same buffers (made once, as nccl-tests does). Checking
    # first, not after the clock stops, keeps the allocation and reading of a second set of
    # buffers out of the run-up to the timed loop: with it there, gloo's own per-call temporaries
    # (16 MiB for reduce_scatter / all_gather at 16 MiB) were still being re-faulted in the first
    # timed iterations: 2-5x the page faults of a bare loop, 4,096-page bursts (docs/performance.md).
    timed_loop(start, 1, deadline, device, cuda=session.cuda)
    output_ok, bad = ops.verify(buffers, me, n)
    if plan.warmup:
        timed_loop(start, plan.warmup, deadline, device, cuda=session.cuda)
    barrier(session.control, deadline)  # the timed loop starts together too
    times = timed_loop(start, plan.iters if iters is None else iters, deadline, device, cuda=session.cuda,
                       per_iteration=plan.per_iteration)
    return StepRecord(dim, op, buffers.nbytes, group_index, ranks, step=index, times_s=times, output_ok=output_ok,
                      bad_sources=[ranks[b] for b in bad])


def publish(board: Board, rank: int, host: str, records: list[StepRecord], status: Status,
            nccl: NcclAccount | None = None, nccl_missing: str = "") -> None:
    """This rank's measurements and end state, and NCCL's account of its communicators, for rank 0.

    The account goes first, under its own key, without what only this rank says (its rank, host
    and pid: rank 0 knows them): ranks whose NCCL said the same send the same bytes."""
    if nccl is not None:
        board.put(keys.NCCL_ACCOUNT.at(rank), msgspec.structs.replace(nccl, rank=None, host="", pid=0))
    board.put(keys.RESULT.at(rank), ProbeReport(host, records, status, nccl_missing))
