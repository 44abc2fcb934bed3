"""One rank's side of the probes: process group and DeviceMesh, then every step under a deadline.

The process group forms on the run's own c10d store (no second port). Every group of a
dimension runs the same step at once, after a barrier on the control group (gloo), so a
dimension costs one group's time. A step that overruns --probe-timeout stops this rank's
probing: it records where it stopped in the store and never touches the stuck
communicator again; rank 0 works out from the store who did not take part.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from preflight.lib.errors import one_line
from preflight.lib.mesh_shape import WORLD_DIM, dim_groups
from preflight.lib.waiting import wait_until
from preflight.model import World
from preflight.probes import ops
from preflight.probes.plan import ProbePlan
from preflight.probes.timing import ProbeFailed, ProbeTimeout, barrier, timed_call


@dataclass
class StepRecord:
    """What one rank measured in one step (JSON through the store)."""

    step: int
    dim: str
    op: str
    size_bytes: int
    group_index: int
    ranks: list[int]
    times_s: list[float]
    output_ok: bool = True
    bad_sources: list[int] = field(default_factory=list)  # global ranks whose data arrived wrong


@dataclass
class Status:
    """Where a rank's probing ended: done, or the step and phase where it stopped."""

    state: str = "done"  # done | timeout | failed
    step: int = -1
    phase: str = ""  # barrier | op | verify
    reason: str = ""
    elapsed_s: float = 0.0  # from the step's start to the expiry


@dataclass
class Session:
    """Process groups of one rank: the control group and, per dimension, its own group."""

    world: World
    plan: ProbePlan
    store: Any  # PrefixStore for probe keys
    device: str
    dtype: Any
    control: Any
    groups: dict[str, tuple[Any, list[int], int]]  # dim -> (process group, global ranks, group index)
    timeout_s: float


def choose_backend(requested: str, world: World, store: Any, timeout_s: float) -> str:
    """auto = nccl when every rank has a GPU for its local rank; all ranks agree via the store."""
    if requested != "auto":
        return requested
    import torch

    has_gpu = torch.cuda.is_available() and torch.cuda.device_count() > world.local_rank
    if has_gpu:
        store.add("gpu_ranks", 1)
    store.add("backend_votes", 1)
    if not wait_until(lambda: store.add("backend_votes", 0) >= world.world_size, timeout_s):
        raise ProbeTimeout("not every rank voted on the backend in time")
    return "nccl" if store.add("gpu_ranks", 0) == world.world_size else "gloo"


def open_session(world: World, plan: ProbePlan, store: Any, backend: str, timeout_s: float) -> Session:
    """Init the process group on the run's store and build the DeviceMesh (raises on failure)."""
    import torch
    import torch.distributed as dist
    from torch.distributed import PrefixStore
    from torch.distributed.device_mesh import init_device_mesh

    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda":
        # A hang must tear down the communicator instead of blocking forever (set before init).
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        torch.cuda.set_device(world.local_rank)
    # A short PG timeout bounds destroy_process_group after a hang (it waits out pending ops).
    dist.init_process_group(backend, store=PrefixStore("pg", store), rank=world.rank,
                            world_size=world.world_size, timeout=timedelta(seconds=timeout_s + 5))
    control = dist.new_group(backend="gloo") if backend == "nccl" else dist.group.WORLD
    layout = {}
    mesh_dims = [d for d in plan.dims if d.name != WORLD_DIM]
    if mesh_dims:
        mesh = init_device_mesh(device, tuple(d.size for d in mesh_dims),
                                mesh_dim_names=tuple(d.name for d in mesh_dims))
        for name, groups in dim_groups(mesh_dims).items():
            pg = mesh[name].get_group()
            index = next(i for i, g in enumerate(groups) if world.rank in g)
            layout[name] = (pg, sorted(dist.get_process_group_ranks(pg)), index)
    if any(dim == WORLD_DIM for dim, _, _ in plan.steps()):
        # Its own group: a hang in it must not share a communicator with the control barriers.
        layout[WORLD_DIM] = (dist.new_group(backend=backend), list(range(world.world_size)), 0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    return Session(world, plan, store, device, dtype, control, layout, timeout_s)


def run_steps(session: Session) -> tuple[list[StepRecord], Status]:
    """Every step of the plan on this rank; stops at the first step that overruns or fails."""
    records: list[StepRecord] = []
    for index, (dim, op, size) in enumerate(session.plan.steps()):
        session.store.set(f"pos/{session.world.rank}", str(index))
        started = time.monotonic()
        deadline = started + session.timeout_s
        phase = "barrier"
        try:
            barrier(session.control, deadline)  # every group of the dimension starts together
            phase = "op"
            records.append(_measure(session, index, dim, op, size, deadline))
        except ProbeTimeout as exc:
            return records, Status("timeout", index, exc.phase, str(exc)[:200], time.monotonic() - started)
        except (ProbeFailed, RuntimeError) as exc:
            return records, Status("failed", index, phase, one_line(exc),
                                   time.monotonic() - started)
    return records, Status()


def _measure(session: Session, index: int, dim: str, op: str, size: int, deadline: float) -> StepRecord:
    group, ranks, group_index = session.groups[dim]
    me, n = ranks.index(session.world.rank), len(ranks)
    plan, device = session.plan, session.device
    buffers = ops.make_buffers(op, size, me, n, session.dtype, device)

    def start() -> list[Any]:
        return ops.launch(buffers, group, ranks, me)

    for _ in range(plan.warmup):
        timed_call(start, deadline, device)
    barrier(session.control, deadline)  # the timed loop starts together too
    times = [timed_call(start, deadline, device) for _ in range(plan.iters)]
    # One more call on fresh inputs, checked against the known result.
    buffers = ops.make_buffers(op, size, me, n, session.dtype, device)
    timed_call(start, deadline, device)
    output_ok, bad = ops.verify(buffers, me, n)
    return StepRecord(index, dim, op, buffers.nbytes, group_index, ranks, times, output_ok,
                      [ranks[b] for b in bad])


def publish(session_store: Any, rank: int, host: str, records: list[StepRecord], status: Status) -> None:
    """This rank's measurements and end state, for rank 0."""
    payload = {"host": host, "records": [asdict(r) for r in records], "status": asdict(status)}
    session_store.set(f"res/{rank}", json.dumps(payload))
