"""Timing collectives under a deadline, as nccl-tests does: perf_counter on CPU, CUDA events on GPU.

A deadline expiring raises ProbeTimeout; the stuck communicator is never waited on again.
A wait longer than SLICE_S asks, between slices, whether a peer is known dead
(probes/liveness.py sets `abort_check`): then it ends at once with PeerDied, instead of
running out the deadline on a collective that can never finish.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from itertools import pairwise
from typing import Any

from preflight.lib.errors import one_line

SLICE_S = 1.0  # a long wait looks for dead peers this often

# Set while a probe session runs (probes/liveness.py): the reason the probes must stop now (a
# peer is dead), or "" to go on. Module state because every wait of the probes shares it.
abort_check: Callable[[], str] | None = None


class ProbeTimeout(Exception):
    """A collective or barrier did not finish before its deadline."""

    phase = "op"
    peer: int | None = None  # a point-to-point exchange's other rank (pairwise.py): the one it waited on


class ProbeFailed(Exception):
    """A collective raised (a peer closed the connection, the backend reported an error)."""

    peer: int | None = None  # a point-to-point exchange's other rank (pairwise.py)


class PeerDied(ProbeFailed):
    """A peer of this collective is known dead (its heartbeat stopped): it can never finish."""


def check_abort() -> None:
    """Raise PeerDied when rank 0 has published a dead rank."""
    reason = abort_check() if abort_check is not None else ""
    if reason:
        raise PeerDied(reason)


def remaining(deadline: float) -> float:
    """Seconds left until a time.monotonic() deadline; ProbeTimeout when none are."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise ProbeTimeout("deadline passed")
    return left


def wait_works(works: list[Any], deadline: float) -> None:
    """Wait on the host for every (gloo) work object until the deadline.

    Work.wait(timeout) returns or raises in time on gloo. NCCL works are never waited on the
    host: timed_loop makes the stream wait on them and polls a CUDA event instead.
    """
    for work in works:
        if work is None:  # a completed synchronous call
            continue
        while True:
            left = remaining(deadline)
            try:
                work.wait(timeout=timedelta(seconds=min(left, SLICE_S)))
                break
            except RuntimeError as exc:
                if "timed out" not in str(exc).lower() and "timeout" not in str(exc).lower():
                    raise ProbeFailed(one_line(exc)) from exc
                if left <= SLICE_S:
                    raise ProbeTimeout(str(exc)) from exc
                check_abort()  # a slice passed: wait on, unless a peer is known dead


def timed_loop(start: Callable[[], list[Any]], iters: int, deadline: float, device: Any, *,
               cuda: Any = None, per_iteration: bool = False) -> list[float]:
    """Seconds per call, timed as nccl-tests does: `iters` calls back to back, one synchronisation.

    Returns [elapsed / iters], or, with per_iteration, one figure per call (CUDA events around
    each call on GPU, still one synchronisation at the end; perf_counter marks on CPU).
    On GPU every call is queued without a host wait (the current stream waits on each
    collective's work, which with TORCH_NCCL_BLOCKING_WAIT off does not block the host), then
    one event is polled against the deadline. On gloo a work runs on the process group's own
    threads, two at a time, so each call is awaited before the next starts; the clock still
    spans the whole loop.
    """
    if str(getattr(device, "type", device)) == "cpu":  # a torch.device or its kind
        marks = [time.perf_counter()]
        for _ in range(iters):
            wait_works(start(), deadline)
            marks.append(time.perf_counter())
        if per_iteration:
            return [b - a for a, b in pairwise(marks)]
        return [(marks[-1] - marks[0]) / iters]
    if cuda is None:
        import torch

        cuda = torch.cuda
    # The bound GPU's stream, by name: a thread's current device is 0 unless it set another.
    stream = cuda.current_stream(device)
    events = [cuda.Event(enable_timing=True) for _ in range(iters + 1 if per_iteration else 2)]
    events[0].record(stream)
    for i in range(iters):
        for work in start():
            if work is not None:
                work.wait()  # the current stream waits for the collective; the host does not
        if per_iteration:
            events[i + 1].record(stream)
    events[-1].record(stream)
    next_check = time.monotonic() + SLICE_S
    while not events[-1].query():  # the one synchronisation, bounded by the deadline
        remaining(deadline)
        if time.monotonic() >= next_check:
            check_abort()
            next_check = time.monotonic() + SLICE_S
        time.sleep(0.0002)
    if per_iteration:
        return [a.elapsed_time(b) / 1e3 for a, b in pairwise(events)]
    return [events[0].elapsed_time(events[-1]) / 1e3 / iters]


def barrier(group: Any, deadline: float) -> None:
    """A barrier on the (gloo) control group, bounded by the deadline."""
    import torch.distributed as dist

    try:
        wait_works([dist.barrier(group=group, async_op=True)], deadline)
    except ProbeTimeout as exc:
        exc.phase = "barrier"  # waiting for peers that are elsewhere, not inside the collective
        raise
