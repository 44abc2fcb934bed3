"""Timing collectives under a deadline, as nccl-tests does: perf_counter on CPU, CUDA events on GPU.

A deadline expiring raises ProbeTimeout; the stuck communicator is never waited on again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from itertools import pairwise
from typing import Any

from preflight.lib.errors import one_line


class ProbeTimeout(Exception):
    """A collective or barrier did not finish before its deadline."""

    phase = "op"


class ProbeFailed(Exception):
    """A collective raised (a peer closed the connection, the backend reported an error)."""


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
        try:
            work.wait(timeout=timedelta(seconds=remaining(deadline)))
        except RuntimeError as exc:
            if "timed out" in str(exc).lower() or "timeout" in str(exc).lower():
                raise ProbeTimeout(str(exc)) from exc
            raise ProbeFailed(one_line(exc)) from exc


def timed_loop(start: Callable[[], list[Any]], iters: int, deadline: float, device: str, *,
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
    if device == "cpu":
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
    events = [cuda.Event(enable_timing=True) for _ in range(iters + 1 if per_iteration else 2)]
    events[0].record()
    for i in range(iters):
        for work in start():
            if work is not None:
                work.wait()  # the current stream waits for the collective; the host does not
        if per_iteration:
            events[i + 1].record()
    events[-1].record()
    while not events[-1].query():  # the one synchronisation, bounded by the deadline
        remaining(deadline)
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
