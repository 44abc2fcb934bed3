"""The collectives' buffers sized against the device memory the ranks have free.

In a training process (preflight.check) the GPU is mostly the trainer's: a trainer at 75 of 80 GiB
has 5 GiB left, and an all_to_all at 256 MiB holds its send and receive buffers, the check's
expected values and NCCL's own staging. An allocation that fails there would end the step as a
failed collective, or, on NCCL, as a communicator left waiting: a probe "hang" that is only a
full GPU. So before the steps every rank says how much its device has free, the ranks agree on the
least of them (one MIN all_reduce on the control group, bounded by the deadline), and a step whose
buffers would take more than MEMORY_SHARE of that is skipped on every rank alike, with its reason:
the same decision everywhere, so no rank waits in a collective its peers skipped.
"""

from __future__ import annotations

from typing import Any

from preflight.model.probe_skips import Skipped
from preflight.probes import ops
from preflight.probes.plan import CONNECT
from preflight.probes.timing import wait_works

MEMORY_SHARE = 0.5  # of the least free memory among the ranks: the rest stays the trainer's and NCCL's
HEADROOM = 2  # the buffers, again: the check's expected values, masks, NCCL's staging of the same size


def step_bytes(op: str, size: int, group_size: int, dtype: Any) -> int:
    """Device bytes a step holds at its peak: its send and receive buffers (ops.held_bytes) times HEADROOM."""
    return HEADROOM * ops.held_bytes(op, size, group_size, dtype)


def least_free(session: Any, deadline: float) -> int:
    """The least free device memory among all ranks (this rank's device: mem_get_info), agreed on the
    control group; raises ProbeTimeout / ProbeFailed as a barrier does."""
    import torch
    import torch.distributed as dist

    free = int(session.cuda.mem_get_info(session.device)[0]) if session.cuda is not None else \
        int(torch.cuda.mem_get_info(session.device)[0])
    value = torch.tensor([free], dtype=torch.int64)
    wait_works([dist.all_reduce(value, op=dist.ReduceOp.MIN, group=session.control, async_op=True)], deadline)
    return int(value.item())


def plan_skips(session: Any, free: int) -> list[Skipped]:
    """The steps whose buffers do not fit MEMORY_SHARE of `free` bytes (the same list on every rank)."""
    skipped = []
    for index, (dim, op, size) in enumerate(session.plan.steps()):
        if op == CONNECT:
            continue
        need = step_bytes(op, size, len(session.groups[dim][1]), session.dtype)
        if need > free * MEMORY_SHARE:
            skipped.append(Skipped(index, dim, op, size, (
                f"{op} at {size / 2**20:g} MiB on {dim} needs about {need / 2**20:.0f} MiB of device memory on "
                f"each rank; the least free among the ranks is {free / 2**20:.0f} MiB (at most "
                f"{MEMORY_SHARE:g} of it is used)")))
    return skipped
