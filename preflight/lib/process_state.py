"""The trainer's process as preflight.check found it: what a check may touch, put back; its threads gone.

preflight.check runs inside a training process. What the probes change on purpose (the
intra-op threads of the CPU products, TF32 for one figure) is restored where it is changed;
this is the front door's guarantee on top: torch's and Python's random states, torch's thread
counts and the new TF32 API's setting are put back as they were, and every thread the call
started is waited for (bounded: a thread stuck in a collective is the report's `stuck`, and the
process must leave then anyway).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator

JOIN_S = 5.0  # for the call's own threads to end (heartbeats, watches, samplers stop at once)


@contextlib.contextmanager
def left_as_found(join_s: float = JOIN_S) -> Iterator[None]:
    """Run the block, then put back what it may have moved and wait for the threads it started."""
    import torch

    matmul = torch.backends.cuda.matmul
    saved_tf32 = getattr(matmul, "fp32_precision", None)  # the new API (never the legacy flag: it may raise)
    saved = (torch.get_rng_state(), random.getstate(), torch.get_num_threads())
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    before = set(threading.enumerate())
    try:
        yield
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        if torch.get_num_threads() != saved[2]:
            torch.set_num_threads(saved[2])
        if saved_tf32 is not None and matmul.fp32_precision != saved_tf32:
            matmul.fp32_precision = saved_tf32
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        until = time.monotonic() + join_s
        for thread in set(threading.enumerate()) - before:
            if thread is not threading.current_thread():
                thread.join(max(0.0, until - time.monotonic()))
