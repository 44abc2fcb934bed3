"""One rank's side of the probes: device binding, process group and DeviceMesh, then every step under a deadline.

The process group forms on the run's own c10d store (no second port). Every group of a
dimension runs the same step at once, after a barrier on the control group (gloo), so a
dimension costs one group's time. The plan's first steps create each dimension's
communicators (plan.CONNECT), each under its own deadline. A step that overruns
--probe-timeout stops this rank's probing: it records where it stopped in the store and never
touches the stuck communicator again; rank 0 works out from the store who did not take part.

The CUDA boundary is one object, `cuda` (torch.cuda by default): device count, set_device,
device properties and events go through it, so tests replay devices with a data-driven fake
(tests/helpers/fake_cuda.py) through this same code.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

from msgspec import Struct, field

from preflight.channel import keys
from preflight.channel.board import BadValue, Board
from preflight.lib.errors import one_line
from preflight.lib.hostlist import host_text
from preflight.lib.mesh_shape import WORLD_DIM, dim_groups
from preflight.lib.waiting import wait_until
from preflight.model import World
from preflight.model.job_groups import JobGroups
from preflight.model.messages import BoundDevice, BoundRecord, NoGpu
from preflight.probes import memory_fit, mig
from preflight.probes.plan import ProbePlan
from preflight.probes.timing import ProbeTimeout

# The environment of the probe's NCCL process groups, set only while they are created (torch
# reads it in each ProcessGroupNCCL's constructor), whatever the user's job script says:
# 2 = clean up only: on a timeout the watchdog aborts the communicator and keeps the process,
#     so rank 0 still writes the report (1 and 3, the default, tear the process down);
# blocking wait off: Work.wait() only makes the stream wait, so the probe's own deadline, not
#     the process-group timeout, bounds every wait;
# no heartbeat monitor: it kills the process after a timeout's debug dump.
PROBE_NCCL_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",
    "TORCH_NCCL_BLOCKING_WAIT": "0",
    "TORCH_NCCL_ENABLE_MONITORING": "0",
    # Eager init serialises unbatched send/recv with the group's other ops; the probes run one op
    # at a time anyway, so torch's warning about it (once per rank, seen on an H100) is noise.
    "TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING": "false",
}
PROBE_NCCL_UNSET = ("NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT")  # legacy names of the above


T = TypeVar("T")


class BindError(Exception):
    """This rank cannot be given one GPU the way launchers bind them."""




class BackendChoice(Struct):
    """The backend the probes use, and why (auto decides by the ranks' votes)."""

    backend: str
    reason: str = ""






class Session(Struct):
    """Process groups of one rank: the control group and, per dimension, its own group."""

    world: World
    plan: ProbePlan
    # The probes' keys: the client of the thread that runs the steps (orchestrate hands the set-up's own
    # client, torch's, over to the run's once the set-up thread is done).
    store: Any
    # torch.device("cpu"), or torch.device("cuda", k): the GPU this rank bound. Every tensor, event
    # and synchronize of the probes names it; a bare "cuda" would mean "this thread's current
    # device", which is 0 in every thread that did not set it (CUDA's current device is per thread).
    device: Any
    dtype: Any
    control: Any
    groups: dict[str, tuple[Any, list[int], int]]  # dim -> (process group, global ranks, group index)
    timeout_s: float
    backend: str = ""
    bound: BoundDevice | None = None
    cuda: Any = None
    world_group: Any = None  # the default process group, on the probe backend
    # Whose groups these are: "preflight" (made here, torn down here) or "job" (the job's own,
    # handed in by preflight.check: never destroyed here). `owned` lists what was made here anyway.
    owner: str = "preflight"
    owned: list[Any] = field(default_factory=list)
    # A localization step (second pass, round robin, group testing) gave up on a collective: it may
    # still be in flight, so the groups must not be torn down (the process leaves by os._exit).
    abandoned: bool = False
    # Values under the probes' keys that did not decode (rank -> the first): rank 0 reports them, naming the rank.
    bad_values: dict[int, BadValue] = field(default_factory=dict)
    stopped_why: str = ""  # rank 0: why a localization step gave up (names the rank it was stuck with)
    # Rank 0: the peers its own localization exchanges gave up on (rank -> why; `gave_up`). Alive maybe, but
    # inside an exchange that outlived --probe-timeout: the verdict's hand-off does not wait for them.
    stuck_with: dict[int, str] = field(default_factory=dict)
    skipped: list[memory_fit.Skipped] = field(default_factory=list)  # steps too big for the ranks' free memory
    on_mig: list[mig.MigRank] = field(default_factory=list)  # ranks on a MIG instance: no collective on NCCL (mig.py)

    def gave_up(self, exc: BaseException, step: str) -> None:
        """A localization step (`step`: "localization", "confirming", ...) broke off on `exc`: the groups
        stay up (a collective may still be in flight), and rank 0 marks the peer its own exchange was
        stuck with (`exc.peer`, set by pairwise.run_rounds): that rank, alive or not, is inside an
        exchange that outlived --probe-timeout and will not read the verdict (orchestrate.py)."""
        self.abandoned = True
        peer = getattr(exc, "peer", None)
        if self.world.rank == 0 and isinstance(peer, int):
            self.stuck_with[peer] = f"its {step} exchange with rank 0 did not complete"

    def kept(self, value: T | BadValue | None) -> T | None:
        """A value read from the store, or None: a bad one is set aside for rank 0's report."""
        if isinstance(value, BadValue):
            self.bad_values.setdefault(value.rank, value)
            return None
        return value

    @property
    def board(self) -> Board:
        """The probes' keys in the store, typed (channel/board.py)."""
        return Board(self.store)

    @property
    def kind(self) -> str:
        """"cuda" or "cpu": what kind of device the probes run on."""
        return str(self.device.type)

    def enter_device(self) -> None:
        """Make the bound GPU this thread's current device: the first call of every thread that touches
        the GPU (a new thread starts on device 0; NCCL and CUDA events act on the current device)."""
        if self.kind == "cuda":
            (self.cuda or _torch_cuda()).set_device(self.device.index)

    def localization(self) -> dict[str, Any]:
        """Keyword arguments of pairwise.run_rounds: the probe's own backend and device."""
        return {"group": self.world_group, "device": self.device, "dtype": self.dtype, "cuda": self.cuda}


def _torch_cuda() -> Any:
    import torch

    return torch.cuda


def _bus_id(props: Any) -> str:
    """NVML's bus id form from torch's device properties (domain/bus/device ids), where it has them."""
    bus = getattr(props, "pci_bus_id", None)
    if isinstance(bus, str):
        return bus
    if bus is None:
        return ""
    domain, device = int(getattr(props, "pci_domain_id", 0)), int(getattr(props, "pci_device_id", 0))
    return f"{domain:08X}:{int(bus):02X}:{device:02X}.0"


def _uuid(props: Any) -> str:
    value = getattr(props, "uuid", None)
    if value is None or str(value) == "":
        return ""
    text = str(value)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def bind_device(world: World, cuda: Any = None) -> BoundDevice:
    """The GPU this rank uses, bound as launchers bind them (raises BindError when none fits).

    One visible device: device 0 (srun --gpus-per-task=1, a per-task CUDA_VISIBLE_DEVICES or
    cgroup). At least as many visible devices as local ranks: LOCAL_RANK. Anything else
    (say 2 visible for 8 local ranks) is ambiguous and an error naming rank, host, the visible
    devices and LOCAL_RANK. set_device is called on the chosen ordinal.
    """
    cuda = cuda or _torch_cuda()
    where = (f"rank {world.rank} on {host_text(world.host)} (LOCAL_RANK={world.local_rank} of "
             f"{world.local_world_size}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})")
    try:
        count = int(cuda.device_count()) if cuda.is_available() else 0
    except Exception as exc:
        raise BindError(f"{where}: CUDA failed: {type(exc).__name__}: {one_line(exc)}") from exc
    if count == 0:
        raise BindError(f"{where}: no CUDA device visible")
    if count == 1:
        index = 0
    elif count >= world.local_world_size and world.local_rank < count:
        index = world.local_rank
    else:
        raise BindError(f"{where}: {count} devices visible, which is neither one per task nor one per local "
                        "rank; give each task one GPU (srun --gpus-per-task=1) or all of the node's")
    try:
        cuda.set_device(index)
        props = cuda.get_device_properties(index)
    except Exception as exc:  # a lost GPU, an ECC-retired one, a cgroup that hides it
        raise BindError(f"{where}: device {index} failed: {type(exc).__name__}: {one_line(exc)}") from exc
    return BoundDevice(index, str(getattr(props, "name", "")), _bus_id(props), _uuid(props))


def decide_backend(requested: str, world: World, store: Any, timeout_s: float, cuda: Any = None) -> BackendChoice:
    """auto = nccl when every rank can bind a GPU (bind_device) and this torch has NCCL; all ranks agree via the store.

    A rank that cannot bind one leaves its reason in the store, so a GPU job that ends on
    gloo says which rank and why.
    """
    if requested != "auto":
        return BackendChoice(requested, f"--backend {requested}")
    import torch.distributed as dist

    nccl_available = getattr(cuda, "nccl_available", dist.is_nccl_available)  # a fake boundary answers it too
    board = Board(store)
    try:
        if not nccl_available():
            raise BindError(f"rank {world.rank} on {host_text(world.host)}: this torch has no NCCL")
        bind_device(world, cuda)
        board.count(keys.GPU_RANKS.key)
    except BindError as exc:
        board.put(keys.NO_GPU.at(world.rank), NoGpu(str(exc)))
    board.count(keys.BACKEND_VOTES.key)
    if not wait_until(lambda: board.count(keys.BACKEND_VOTES.key, 0) >= world.world_size, timeout_s):
        raise ProbeTimeout("not every rank voted on the backend in time")
    gpu_ranks = board.count(keys.GPU_RANKS.key, 0)
    if gpu_ranks == world.world_size:
        return BackendChoice("nccl", "auto: every rank has a GPU")
    first = next((r for r in range(world.world_size) if board.has(keys.NO_GPU.at(r))), None)
    told = board.read(keys.NO_GPU.at(first), first) if first is not None else None
    why = told.why if isinstance(told, NoGpu) else f"rank {first} cannot" if first is not None else "a rank has no GPU"
    return BackendChoice("gloo", f"auto: {world.world_size - gpu_ranks} of {world.world_size} rank(s) "
                                 f"cannot use a GPU, e.g. {why}")


@contextlib.contextmanager
def probe_nccl_env() -> Iterator[None]:
    """PROBE_NCCL_ENV while the probe's process groups are created; the user's values after."""
    saved = {name: os.environ.get(name) for name in (*PROBE_NCCL_ENV, *PROBE_NCCL_UNSET)}
    os.environ.update(PROBE_NCCL_ENV)
    for name in PROBE_NCCL_UNSET:
        os.environ.pop(name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def init_kwargs(backend: str, bound: BoundDevice | None, timeout_s: float,
                init: Any = None) -> dict[str, Any]:
    """init_process_group's keyword arguments: device_id (eager communicator creation) where torch takes it.

    The process-group timeout is the probe deadline plus 5 s: after a hang the watchdog aborts
    the communicator (clean up only, PROBE_NCCL_ENV) once every rank has stopped waiting.
    """
    import torch

    kwargs: dict[str, Any] = {"timeout": timedelta(seconds=timeout_s + 5)}
    init = init or torch.distributed.init_process_group
    if backend == "nccl" and bound is not None and "device_id" in inspect.signature(init).parameters:
        kwargs["device_id"] = torch.device("cuda", bound.index)
    return kwargs


def open_session(world: World, plan: ProbePlan, store: Any, backend: str, timeout_s: float,
                 cuda: Any = None, mark: Callable[[str], None] | None = None) -> Session:
    """Bind the GPU, init the process group on the run's store and build the DeviceMesh (raises on failure).

    mark(stage) is called as each stage of setup.STAGES begins (probes/setup.py runs this
    under its own deadline and names the ranks furthest behind when it expires).
    """
    import torch
    import torch.distributed as dist
    from torch.distributed import PrefixStore
    from torch.distributed.device_mesh import init_device_mesh

    kind = "cuda" if backend == "nccl" else "cpu"
    device = torch.device("cpu")
    bound = None
    mark = mark or (lambda stage: None)
    env = probe_nccl_env() if kind == "cuda" else contextlib.nullcontext()
    with env:
        if kind == "cuda":
            mark("bind GPU")
            cuda = cuda or _torch_cuda()
            bound = bind_device(world, cuda)  # BindError names rank, host, visible devices, LOCAL_RANK
            device = torch.device("cuda", bound.index)
        # Rank 0 reads every rank's backend and bound device from the store (collect.devices); every rank
        # reads them too, to make no NCCL communicator on a run with a MIG instance (mig.py).
        Board(store).put(keys.BOUND.at(world.rank), BoundRecord(world.host, backend, bound))
        eager = kind == "cuda" and mig.eager_nccl(Board(store), world.world_size, timeout_s)
        mark("process group")
        dist.init_process_group(backend, store=PrefixStore("pg", store), rank=world.rank, world_size=world.world_size,
                                **init_kwargs(backend, bound if eager else None, timeout_s))
        mark("control group")
        control = dist.new_group(backend="gloo") if backend == "nccl" else dist.group.WORLD
        layout = {}
        mesh_dims = [d for d in plan.dims if d.name != WORLD_DIM]
        if mesh_dims:
            mark("DeviceMesh")
            mesh = init_device_mesh(kind, tuple(d.size for d in mesh_dims),
                                    mesh_dim_names=tuple(d.name for d in mesh_dims))
            for name, groups in dim_groups(mesh_dims).items():
                pg = mesh[name].get_group()
                index = next(i for i, g in enumerate(groups) if world.rank in g)
                layout[name] = (pg, sorted(dist.get_process_group_ranks(pg)), index)
        if any(dim == WORLD_DIM for dim, _, _ in plan.steps()):
            # Its own group: a hang in it must not share a communicator with the control barriers.
            mark("world group")
            layout[WORLD_DIM] = (dist.new_group(backend=backend), list(range(world.world_size)), 0)
    dtype = torch.bfloat16 if kind == "cuda" else torch.float32
    return Session(world, plan, store, device, dtype, control, layout, timeout_s, backend, bound, cuda,
                   dist.group.WORLD)


def adopt_session(world: World, plan: ProbePlan, store: Any, job: JobGroups, timeout_s: float,
                  cuda: Any = None) -> Session:
    """A session on the job's own groups: nothing is initialised or rebuilt.

    The barriers between steps need a CPU-capable group: the default group when it is gloo,
    else one new gloo group, which teardown destroys (the job's groups it never touches).
    """
    import torch
    import torch.distributed as dist

    owned: list[Any] = []
    if job.backend == "gloo":
        control = job.world_group
    else:
        control = dist.new_group(backend="gloo")
        owned.append(control)
    bound = None
    device = torch.device("cpu")
    if job.device == "cuda":
        cuda = cuda or _torch_cuda()
        if job.device_index is None:
            raise BindError(f"rank {world.rank}: the job's CUDA device was not read in the caller's thread")
        index = job.device_index  # the job bound it (read in the trainer's thread): preflight does not rebind it
        props = cuda.get_device_properties(index)
        bound = BoundDevice(index, str(getattr(props, "name", "")), _bus_id(props), _uuid(props))
        device = torch.device("cuda", index)
    dtype = torch.bfloat16 if job.device == "cuda" else torch.float32
    Board(store).put(keys.BOUND.at(world.rank), BoundRecord(world.host, job.backend, bound))
    layout = {name: job.dims[name] for name in {dim for dim, _, _ in plan.steps()}}
    return Session(world, plan, store, device, dtype, control, layout, timeout_s, job.backend, bound, cuda,
                   job.world_group, owner="job", owned=owned)
