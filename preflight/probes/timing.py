"""Timing one collective call under a deadline: perf_counter on CPU, CUDA events on GPU.

A deadline expiring raises ProbeTimeout; the stuck communicator is never waited on again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
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


def wait_works(works: list[Any], deadline: float, device: str) -> None:
    """Wait for every work object until the deadline.

    On CPU (gloo) Work.wait(timeout) returns or raises in time. On GPU, Work.wait() only
    makes the current stream wait, so completion is polled (is_completed) until the deadline.
    """
    for work in works:
        if work is None:  # a completed synchronous call
            continue
        if device == "cpu":
            try:
                work.wait(timeout=timedelta(seconds=remaining(deadline)))
            except RuntimeError as exc:
                if "timed out" in str(exc).lower() or "timeout" in str(exc).lower():
                    raise ProbeTimeout(str(exc)) from exc
                raise ProbeFailed(one_line(exc)) from exc
        else:
            while not work.is_completed():
                remaining(deadline)
                time.sleep(0.0002)
            work.wait()


def timed_call(start: Callable[[], list[Any]], deadline: float, device: str) -> float:
    """Seconds one call took on this rank: start() launches it, the wait ends it."""
    if device == "cpu":
        began = time.perf_counter()
        wait_works(start(), deadline, device)
        return time.perf_counter() - began
    import torch

    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    works = start()
    for work in works:
        if work is not None:
            work.wait()  # the stream waits for the collective
    end.record()
    while not end.query():
        remaining(deadline)
        time.sleep(0.0002)
    return begin.elapsed_time(end) / 1e3


def barrier(group: Any, deadline: float) -> None:
    """A barrier on the (gloo) control group, bounded by the deadline."""
    import torch.distributed as dist

    try:
        wait_works([dist.barrier(group=group, async_op=True)], deadline, "cpu")
    except ProbeTimeout as exc:
        exc.phase = "barrier"  # waiting for peers that are elsewhere, not inside the collective
        raise
