"""A FAKE of the CUDA boundary (torch.cuda and CUDA tensors), a model as strict as CUDA itself.

No GPU exists on CI machines. `FakeCuda` answers the torch.cuda calls preflight makes, from
data, and holds CUDA's rules where preflight could break them:

- the devices this process sees (CUDA ordinals, in order) with their name, UUID, PCI bus id,
  PCIe switch and NUMA node (`gpu(...)`), which of them are lost, and free memory per device;
  `cuda_view` numbers a node's GPUs as CUDA does (CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES), so a
  mixed node's CUDA ordinals differ from NVML's indices as they do on hardware;
- the current device belongs to the calling THREAD and starts at 0 in every new thread
  (cudaSetDevice / torch.cuda.set_device are per thread); CUDA is initialised lazily, by the first
  call that needs a context (`is_initialized()`; device_count and is_available need none);
- `init_process_group(device_id=...)` binds the default group to that device (its
  `bound_device_id`, as torch's) without making it any thread's current device (only where
  `binds_default_group`: the traffic underneath is gloo's, whose collectives then make their
  tensors on that CUDA device in C++, out of the model's reach);
- every allocation, stream, event record and synchronize is recorded as a `Call` with its
  device, whether it named the device or left it to the thread's current one ("bare"), and
  the thread that made it: a test reads `calls` and asserts nothing touched another device;
- memory: allocations count against the device's free memory (an allocation beyond it raises
  CUDA's out-of-memory error); torch's caching allocator is modelled (reserved memory stays
  reserved until empty_cache()), and so is its host caching allocator of pinned memory (pinned
  bytes stay cached after their tensor is freed until torch.accelerator.empty_host_cache()), and a
  CUDA context per device the process uses (`contexts`, `context_bytes` of its memory), and
  torch's cuBLAS workspaces: the first product of a thread (its cuBLAS handle) on a stream takes
  a workspace from the caching allocator that torch keeps, past the thread's end, until
  torch._C._cuda_clearCublasWorkspaces() (`blas_workspace_bytes`, 32 MiB), and the process's
  first product on a device takes a block that nothing gives back (`blas_first_product_bytes`,
  2 MiB). Both as an H200 under torch 2.11 showed them (docs/verification.md): a one-rank
  trainer's reserved memory grew by 34 MiB across the device family, by 2 MiB once the
  workspaces were cleared, and fell by the trainer's own 32 MiB workspace where it had run a
  product first (its 2 MiB block made already);
- a communicator that refuses two ranks of one host on one device (NCCL's "Duplicate GPU
  detected"): `Node.join`;
- a virtual clock per stream for events (record() stamps the time the stream's queued work
  ends; kernels queue work at `rates` on the calling thread's current stream of their device,
  which is per thread, as torch's: the default stream until the thread selects another), and
  CUDA's rules of time: an event is complete only when
  the device has done the work before it, which it does only as the host waits (synchronize, or
  a little per query()); elapsed_time raises as torch and cudaEventElapsedTime do (not
  completed: torch's own words, seen on an H200; not recorded, no timing, two devices); a
  collective takes virtual time on its communicator's stream and the caller's stream includes it
  only once its work is waited on.

Two ways in, one model: injected where preflight takes a `cuda=` (session.bind_device,
decide_backend, timing.timed_loop), or `install()`ed in place of torch.cuda and torch's tensor
factories (so TorchDevice and the collective buffers run through it, their tensors held on the
CPU). No test patches preflight's internals. Whether this torch has NCCL is part of the
boundary too (`nccl_available`), since the CPU wheel CI uses has none. (Longer than most
modules: one fake per boundary, and this boundary is torch.cuda and CUDA tensors together.)
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


def gpu(n: int, uuid_prefix: str = "0000", name: str = "NVIDIA H100 80GB HBM3", free: int = 80 * 2**30,
        switch: int | None = None, numa: int | None = None) -> dict[str, Any]:
    """One GPU's properties as torch reports them (bus ids as NVML shows 18, 2A, 3A, ...), with its
    PCIe switch and NUMA node (2 GPUs per switch, 4 per NUMA node, as on a DGX by default)."""
    bus = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB][n % 8]
    return {"name": name, "pci_domain_id": 0, "pci_bus_id": bus, "pci_device_id": 0,
            "uuid": f"{uuid_prefix}{n:04d}-1111-2222-3333-444444444444", "total_memory": 80 * 2**30,
            "free": free, "switch": n // 2 if switch is None else switch, "numa": n // 4 if numa is None else numa}


def cuda_view(node: list[dict[str, Any]], visible: str | None, order: str | None = None) -> list[dict[str, Any]]:
    """The devices a process sees, by CUDA ordinal, from its node's GPUs (listed in PCI bus order, as NVML
    lists them) as CUDA itself would number them: CUDA_DEVICE_ORDER=PCI_BUS_ID keeps bus order; the
    default FASTEST_FIRST puts the highest compute capability ("capability", default (9, 0)) first, ties
    by bus; then CUDA_VISIBLE_DEVICES picks ordinals or GPU UUID prefixes, stopping at the first it
    cannot resolve. A model of CUDA's numbering written from its documentation (not from preflight's)."""
    ranked = list(node) if (order or "").upper() == "PCI_BUS_ID" else \
        sorted(node, key=lambda g: tuple(-v for v in g.get("capability", (9, 0))))  # sorted() is stable
    if visible is None:
        return ranked
    seen = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isdigit() and int(entry) < len(ranked):
            seen.append(ranked[int(entry)])
            continue
        matches = [g for g in ranked if entry and str(g["uuid"]).startswith(entry.removeprefix("GPU-"))]
        if len(matches) != 1:
            break
        seen.append(matches[0])
    return seen


def h100(n: int, uuid_prefix: str = "0000") -> dict[str, Any]:
    """One H100 (see gpu())."""
    return gpu(n, uuid_prefix)


# Replayed machines: CUDA_VISIBLE_DEVICES as the process sees it.
EIGHT_GPUS = [h100(i) for i in range(8)]  # a node's 8 GPUs, every rank sees all of them
ONE_PER_TASK = {task: [h100(task)] for task in range(8)}  # srun --gpus-per-task=1: task t sees only its own GPU
TWO_OF_EIGHT = [h100(0), h100(1)]  # a CUDA_VISIBLE_DEVICES that fits neither rule


@dataclass(frozen=True)
class Call:
    """One thing done to a device: what, on which ordinal, whether the caller named it, in which thread."""

    what: str  # "alloc" | "event" | "synchronize" | "stream" | "set_device" | "mem_get_info" | "free"
    device: int
    named: bool  # False: a bare "cuda" (or no device), resolved to the thread's current device
    thread: str
    nbytes: int = 0


POLL_QUANTUM_S = 1e-3  # the least virtual time a device does between two polls of an event


class DuplicateGpu(RuntimeError):
    """NCCL's refusal of one GPU twice in a communicator."""


@dataclass
class Node:
    """What ranks of one host share: which GPU each communicator member sits on (NCCL refuses duplicates)."""

    members: dict[str, dict[str, int]] = field(default_factory=dict)  # communicator -> uuid -> rank
    lock: threading.Lock = field(default_factory=threading.Lock)

    def join(self, communicator: str, rank: int, uuid: str) -> None:
        """`rank` joins `communicator` on GPU `uuid`; raises as NCCL does when another rank of this host is on it."""
        with self.lock:
            seats = self.members.setdefault(communicator, {})
            if uuid in seats and seats[uuid] != rank:
                raise DuplicateGpu(f"NCCL error: invalid usage: Duplicate GPU detected : rank {rank} and rank "
                                   f"{seats[uuid]} both on CUDA device {uuid}")
            seats[uuid] = rank


class FakeStream:
    """A stream of one device: when the work queued on it ends (`clock`) and how far the device has got
    with it (`done`, as the host waited). Each device has a default stream; `FakeCuda.Stream` makes others."""

    def __init__(self, device: int) -> None:
        self.device = device
        self.clock = 0.0
        self.done = 0.0


class FakeEvent:
    """A CUDA event on the fake's virtual clock: record() stamps the time the device's queued work ends.

    As strict as CUDA's documentation (cudaEventQuery, cudaEventElapsedTime): the event is complete
    only once the device has done the work queued before it; query() says False until then;
    elapsed_time raises torch's "Both events must be completed" while either event is incomplete
    (torch checks before CUDA would say cudaErrorNotReady; seen on an H200, torch 2.11),
    "invalid resource handle" when either was never recorded or was made without enable_timing,
    and for events of two devices. The device does its work only as the host waits: synchronize()
    (the event's, the device's) completes it; each query() lets the device progress a little.
    """

    def __init__(self, cuda: FakeCuda, enable_timing: bool = False) -> None:
        self.cuda, self.stamp, self.device = cuda, None, None
        self.stream: FakeStream | None = None
        self.enable_timing = enable_timing
        cuda.events.append(self)

    def record(self, stream: FakeStream | None = None) -> None:
        self.device = self.cuda._note("event", stream.device if stream is not None else None)
        self.stream = stream if stream is not None else self.cuda.stream_of(self.device)  # the thread's current
        self.stamp = self.stream.clock

    def _complete(self) -> bool:
        return self.stamp is not None and self.stream is not None and self.stamp <= self.stream.done

    def query(self) -> bool:
        self.cuda.queries += 1
        self.cuda.queried.append(self)
        if self.cuda.stuck:
            return False
        if self.stamp is None or self.device is None:
            return True  # CUDA: an event never recorded is complete
        if not self._complete() and self.stream is not None:
            self.cuda.progress(self.stream)
        return self._complete()

    def synchronize(self) -> None:
        self.cuda._note("synchronize", self.device)
        if self.stream is not None and self.stamp is not None and not self.cuda.stuck:
            self.stream.done = max(self.stream.done, self.stamp)

    def elapsed_time(self, end: FakeEvent) -> float:
        if self.stamp is None or end.stamp is None or not (self.enable_timing and end.enable_timing):
            raise RuntimeError("CUDA error: invalid resource handle")
        if end.device != self.device:  # CUDA: events of two devices cannot be compared
            raise RuntimeError("CUDA error: invalid resource handle (events on different devices)")
        if not (self._complete() and end._complete()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return (end.stamp - self.stamp) * 1e3  # milliseconds, as torch.cuda.Event gives


@dataclass
class FakeWork:
    """A collective launched on the communicator's own stream of the thread's current device (after the work
    already queued there, as NCCL orders it): it takes `seconds` of virtual time, and the current stream
    (where the caller's events are recorded) includes it only once wait() makes that stream wait on it."""

    cuda: FakeCuda
    seconds: float

    def __post_init__(self) -> None:
        device = self.device = self.cuda.current_device()
        start = max(self.cuda.stream_of(device).clock, self.cuda.collective_clock[device])
        self.ends = self.cuda.collective_clock[device] = start + self.seconds

    def wait(self, timeout: Any = None) -> bool:
        self.cuda.stream_waits += 1
        waiting = self.cuda.stream_of(self.device)  # the waiting thread's current stream
        waiting.clock = max(waiting.clock, self.ends)
        return True


@dataclass
class FakeCuda:
    """The devices one process sees, by CUDA ordinal; `lost` ordinals fail like a GPU that fell off the bus.

    rates: figure -> what each device delivers (TFLOP/s of products, GB/s of copies) on the
    virtual clock, per ordinal where `device_rates` says otherwise (a slow GPU).
    """

    devices: list[dict[str, Any]]
    lost: set[int] = field(default_factory=set)
    nccl: bool = True
    stuck: bool = False  # every event query says "not yet" (a hung collective)
    node: Node = field(default_factory=Node)
    rates: dict[str, float] = field(default_factory=lambda: {"gemm": 1.0, "copy": 100.0, "host": 20.0})
    device_rates: dict[int, dict[str, float]] = field(default_factory=dict)
    tunableop: bool = False
    lost_after_sets: int | None = None  # the GPUs fall off the bus after this many set_device calls
    calls: list[Call] = field(default_factory=list)
    events: list[FakeEvent] = field(default_factory=list)
    queries: int = 0
    stream_waits: int = 0
    installed: Any = None  # the install() context when installed for a whole process (install_from_env)
    # NCCL's debug log (tests/helpers/fake_nccl.NcclProcess): written as each NCCL communicator forms
    nccl_log: Any = None
    binds_default_group: bool = False  # init_process_group(device_id=) sets bound_device_id (no gloo traffic then)
    context_bytes: int = 0  # device memory a CUDA context takes (~500 MiB on an H100; 0: not modelled)
    contexts: set[int] = field(default_factory=set)  # devices this process made a context on
    pinned_allocated: int = 0  # pinned host bytes live tensors hold
    pinned_reserved: int = 0  # pinned host bytes the host caching allocator holds (live + cached)
    initialized: bool = False  # a CUDA context exists in this process (torch.cuda.is_initialized)
    blas_workspace_bytes: int = 32 * 2**20  # per (thread's handle, device, stream), kept until cleared
    blas_first_product_bytes: int = 2 * 2**20  # per device, at the process's first product, kept

    def __post_init__(self) -> None:
        self.tunable = SimpleNamespace(is_enabled=lambda: self.tunableop)  # ROCm's TunableOp, off unless asked
        self._thread = threading.local()
        self._lock = threading.Lock()
        self.default_streams = [FakeStream(i) for i in range(len(self.devices))]
        self.streams: list[FakeStream] = list(self.default_streams)  # every stream made, for synchronize()
        self.collective_clock = [0.0] * len(self.devices)  # per device: the communicators' own stream
        self.queried: list[FakeEvent] = []  # every event query(), in order
        self.allocated = [0] * len(self.devices)
        self.reserved = [0] * len(self.devices)
        self.blas_workspaces: dict[tuple[int, int, int], int] = {}  # (thread, device, stream) -> device
        self.blas_first_product: set[int] = set()  # devices a product ran on in this process

    # ---- what torch.cuda answers ----
    def nccl_available(self) -> bool:
        return self.nccl

    def is_available(self) -> bool:
        return bool(self.devices)

    def device_count(self) -> int:
        return len(self.devices)

    def is_initialized(self) -> bool:
        """Whether this process's CUDA is initialised (torch.cuda.is_initialized): any call that needs a context."""
        return self.initialized

    def current_device(self) -> int:
        """This thread's current device: 0 until this thread sets another (initialises CUDA, as torch's does)."""
        self.initialized = True
        return getattr(self._thread, "index", 0)

    @property
    def current(self) -> int:
        return self.current_device()

    def set_device(self, index: Any) -> None:
        index = _ordinal(index)
        sets = sum(c.what == "set_device" for c in self.calls)
        if self.lost_after_sets is not None and sets >= self.lost_after_sets:
            self.lost.add(index)
        self._check(index)
        self.initialized = True
        self._thread.index = index
        self._note("set_device", index)

    @contextlib.contextmanager
    def device(self, index: Any) -> Iterator[None]:
        saved = self.current_device()
        self.set_device(index)
        try:
            yield
        finally:
            self.set_device(saved)

    def get_device_properties(self, index: Any) -> SimpleNamespace:
        index = self.current_device() if index is None else _ordinal(index)
        self._check(index)
        props = {k: v for k, v in self.devices[index].items() if k not in ("free", "switch", "numa", "capability")}
        major, minor = self.devices[index].get("capability", (9, 0))
        return SimpleNamespace(**props, multi_processor_count=132, major=major, minor=minor)

    def current_stream(self, device: Any = None) -> FakeStream:
        """The calling thread's current stream of `device` (torch's is per thread): the default stream until
        this thread selects another (`stream()`, `set_stream()`)."""
        return self.stream_of(self._note("stream", device))

    def stream_of(self, index: int) -> FakeStream:
        """This thread's current stream of device `index`."""
        chosen: dict[int, FakeStream] = getattr(self._thread, "streams", {})
        return chosen.get(index, self.default_streams[index])

    def Stream(self, device: Any = None) -> FakeStream:
        made = FakeStream(self._note("stream", device))
        self.streams.append(made)
        return made

    def set_stream(self, stream: FakeStream) -> None:
        if not hasattr(self._thread, "streams"):
            self._thread.streams = {}
        self._thread.streams[stream.device] = stream

    @contextlib.contextmanager
    def stream(self, stream: FakeStream) -> Iterator[None]:
        saved = self.stream_of(stream.device)
        self.set_stream(stream)
        try:
            yield
        finally:
            self.set_stream(saved)

    def Event(self, enable_timing: bool = False) -> FakeEvent:
        return FakeEvent(self, enable_timing)

    def synchronize(self, device: Any = None) -> None:
        index = self._note("synchronize", device)
        if not self.stuck:  # every stream of the device, as cudaDeviceSynchronize
            for stream in self.streams:
                if stream.device == index:
                    stream.done = max(stream.done, stream.clock)

    def progress(self, stream: FakeStream) -> None:
        """The device does a little of `stream`'s queued work while the host polls (a quarter of what is left,
        at least POLL_QUANTUM_S of virtual time): a query right after queueing work says "not yet"."""
        left = stream.clock - stream.done
        if left > 0:
            stream.done = min(stream.clock, stream.done + max(POLL_QUANTUM_S, left / 4))

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        index = self._note("mem_get_info", device)
        spec = self.devices[index]
        return max(0, self._free(index) - self.reserved[index]), int(spec["total_memory"])

    def _free(self, index: int) -> int:
        """What the device had free before this process, less this process's context on it."""
        return int(self.devices[index]["free"]) - (self.context_bytes if index in self.contexts else 0)

    def memory_reserved(self, device: Any = None) -> int:
        return self.reserved[self._resolve(device)[0]]

    def memory_allocated(self, device: Any = None) -> int:
        return self.allocated[self._resolve(device)[0]]

    def pin(self, nbytes: int) -> None:
        """Pinned host memory taken (torch's host caching allocator: cached after its tensor is freed)."""
        with self._lock:
            self.pinned_allocated += nbytes
            self.pinned_reserved = max(self.pinned_reserved, self.pinned_allocated)

    def unpin(self, nbytes: int) -> None:
        with self._lock:
            self.pinned_allocated -= nbytes

    def empty_host_cache(self) -> None:
        """Cached pinned host memory no tensor holds goes back to the OS (torch.accelerator.empty_host_cache);
        torch.cuda.empty_cache does not touch it."""
        with self._lock:
            self.pinned_reserved = self.pinned_allocated

    def empty_cache(self) -> None:
        """Reserved memory no tensor holds goes back to the device (on the thread's current device, as torch)."""
        with self._lock:
            self.reserved = list(self.allocated)

    # ---- the model's bookkeeping ----
    def allocate(self, device: Any, nbytes: int) -> int:
        """Count nbytes on `device` (raises CUDA's out-of-memory error beyond its free memory)."""
        index = self._note("alloc", device, nbytes)
        with self._lock:
            spare = self.reserved[index] - self.allocated[index]
            if nbytes > spare and self.reserved[index] + nbytes - spare > self._free(index):
                raise RuntimeError(f"CUDA out of memory. Tried to allocate {nbytes / 2**20:.2f} MiB (GPU {index})")
            self.allocated[index] += nbytes
            self.reserved[index] = max(self.reserved[index], self.allocated[index])
        return index

    def release(self, index: int, nbytes: int) -> None:
        """A tensor freed: allocated drops, reserved stays (torch's caching allocator)."""
        with self._lock:
            self.allocated[index] -= nbytes

    def blas_workspace(self, index: int) -> None:
        """A product on device `index`: the process's first takes the block kept for good; the calling thread's
        cuBLAS handle takes a workspace for its current stream the first time (torch's workspace map)."""
        with self._lock:  # marked under the lock: two threads' first products at once take the block once
            first = index not in self.blas_first_product
            self.blas_first_product.add(index)
        if first:
            try:
                self.allocate(index, self.blas_first_product_bytes)
            except RuntimeError:  # out of memory: nothing was taken, the next product tries again
                with self._lock:
                    self.blas_first_product.discard(index)
                raise
        key = (threading.get_ident(), index, id(self.stream_of(index)))
        if key not in self.blas_workspaces:
            self.allocate(index, self.blas_workspace_bytes)
            self.blas_workspaces[key] = index

    def clear_blas_workspaces(self) -> None:
        """torch._C._cuda_clearCublasWorkspaces: every thread's workspaces back to the caching allocator
        (reserved until empty_cache)."""
        for index in self.blas_workspaces.values():
            self.release(index, self.blas_workspace_bytes)
        self.blas_workspaces.clear()

    def kernel(self, index: int, figure: str, amount: float) -> None:
        """Queue `amount` (flops of a product, bytes of a copy) on the calling thread's current stream of
        device `index`."""
        rate = self.device_rates.get(index, {}).get(figure, self.rates[figure])
        self.stream_of(index).clock += amount / (rate * (1e12 if figure == "gemm" else 1e9))

    def on_other_devices(self, mine: int) -> list[Call]:
        """Every recorded call not on device `mine`, or made with a bare "cuda" (the thread's current device).
        Pinning host memory has no device argument (it uses the current device's context): only its device counts."""
        return [c for c in self.calls if c.device != mine or not (c.named or c.what in CONTEXT_CALLS)]

    def _resolve(self, device: Any) -> tuple[int, bool]:
        if device is None:
            return self.current_device(), False
        index = _ordinal(device)
        return (self.current_device(), False) if index is None else (index, True)

    def _note(self, what: str, device: Any, nbytes: int = 0) -> int:
        index, named = self._resolve(device)
        self._check(index)
        self.initialized = True
        with self._lock:
            self.contexts.add(index)  # CUDA 12: the first call that uses a device makes its primary context
            self.calls.append(Call(what, index, named, threading.current_thread().name, nbytes))
        return index

    def _check(self, index: int) -> None:
        if not 0 <= index < len(self.devices):
            raise RuntimeError(f"CUDA error: invalid device ordinal {index}")
        if index in self.lost:
            raise RuntimeError("CUDA error: GPU is lost (cudaErrorDevicesUnavailable)")

    # ---- in place of torch.cuda and torch's tensor factories ----
    def install(self) -> contextlib.AbstractContextManager[None]:
        """This model as torch.cuda, and CUDA tensors held on the CPU through it, until the context ends."""
        return _installed(self)


ABSENT = object()  # an attribute the real torch lacks (the CPU wheel's torch._C has no CUDA calls)


def _ordinal(device: Any) -> int | None:
    """The CUDA ordinal a device argument names, None for a bare "cuda" (raises for a CPU device)."""
    if isinstance(device, int):
        return device
    if isinstance(device, FakeStream):
        return device.device
    import torch

    place = torch.device(device)
    if place.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {place}")
    return place.index


CONTEXT_CALLS = ("pin",)  # calls that act on the thread's current device by design
FACTORIES = ("empty", "zeros", "ones", "randn", "rand", "arange", "full", "tensor", "empty_like", "zeros_like",
             "ones_like")


@contextlib.contextmanager
def _installed(model: FakeCuda) -> Iterator[None]:
    """torch.cuda's calls answered by `model`; CUDA tensors held on the CPU as the model's OnDevice tensors,
    every allocation counted (tests/helpers/fake_cuda_tensors.py): tensor factories and Tensor.to given a
    CUDA device make them, and every operation on them makes its results on their device."""
    import torch
    import torch.distributed as dist

    from tests.helpers.fake_cuda_tensors import Ledger, device_tensor_class, is_cuda

    saved: list[tuple[Any, str, Any]] = []

    def put(owner: Any, name: str, value: Any) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    ledger = Ledger(model)
    on_device = device_tensor_class(model, ledger, _ordinal)
    held = on_device.held

    def factory(real: Any) -> Any:
        @functools.wraps(real)
        def make(*args: Any, device: Any = None, **kwargs: Any) -> Any:
            if not is_cuda(device):  # (a *_like of a CUDA tensor is made on its device by its __torch_function__)
                return real(*args, device=device, **kwargs)
            with torch._C.DisableTorchFunctionSubclass():  # a *_like given a device: from the values alone
                plain = [a.as_subclass(torch.Tensor) if isinstance(a, on_device) else a for a in args]
                return held(real(*plain, device="cpu", **kwargs), device)
        return make

    for name in FACTORIES:
        put(torch, name, factory(getattr(torch, name)))
    real_generator = torch.Generator

    def generator(device: Any = "cpu") -> Any:
        if is_cuda(device):
            model._note("generator", device)
            return real_generator("cpu")
        return real_generator(device)
    put(torch, "Generator", generator)
    real_to = torch.Tensor.to

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        """A host tensor to a CUDA device (a CUDA tensor's .to is its __torch_function__'s)."""
        if isinstance(self, on_device):
            return real_to(self, *args, **kwargs)
        device = kwargs.pop("device", None)
        rest = list(args)
        if rest and is_cuda(rest[0]):
            device = rest.pop(0)
        if not is_cuda(device):
            return real_to(self, *rest, **({"device": device} if device is not None else {}), **kwargs)
        out = real_to(self, *rest, **kwargs) if rest or kwargs else self
        return held(out if out is not self else self.clone(), device)
    put(torch.Tensor, "to", to)

    def pin_memory(self: Any, device: Any = None) -> Any:
        model._note("pin", device, self.numel() * self.element_size())  # through the current device's context
        pinned = self.clone()
        nbytes = pinned.numel() * pinned.element_size()
        model.pin(nbytes)
        weakref.finalize(pinned, model.unpin, nbytes)
        return pinned
    put(torch.Tensor, "pin_memory", pin_memory)
    if hasattr(torch, "accelerator"):
        put(torch.accelerator, "empty_host_cache", model.empty_host_cache)
    saved.append((torch._C, "_cuda_clearCublasWorkspaces", getattr(torch._C, "_cuda_clearCublasWorkspaces", ABSENT)))
    torch._C._cuda_clearCublasWorkspaces = model.clear_blas_workspaces  # absent from the CPU wheel
    for name in ("is_available", "is_initialized", "device_count", "current_device", "set_device",
                 "get_device_properties", "current_stream", "Stream", "stream", "set_stream", "Event",
                 "synchronize", "mem_get_info", "memory_reserved", "memory_allocated", "empty_cache", "device",
                 "tunable"):
        put(torch.cuda, name, getattr(model, name))
    put(dist, "is_nccl_available", model.nccl_available)
    real_init, real_new_group = dist.init_process_group, dist.new_group

    def init_process_group(backend: Any = None, *args: Any, device_id: Any = None, **kwargs: Any) -> Any:
        """NCCL as the model has it: the communicator's GPU is device_id, else the calling thread's
        current device; a second rank of this host on that GPU is refused. The traffic is gloo's."""
        if backend is not None and "nccl" in str(backend):
            index = model.current_device() if device_id is None else _ordinal(device_id)
            uuid = str(model.devices[index]["uuid"])
            store = kwargs.get("store")
            if store is not None and int(store.add(f"fake-cuda/gpu/{uuid}", 1)) > 1:
                raise DuplicateGpu(f"NCCL error: invalid usage: Duplicate GPU detected : rank {kwargs.get('rank')} "
                                   f"shares CUDA device {uuid} with another rank of this host")
            model.node.join("world", int(kwargs.get("rank", -1)), uuid)
            if model.nccl_log is not None and store is not None:  # NCCL logs the communicator it forms
                model.nccl_log.communicator(_nccl_comm(store, int(kwargs["rank"]), int(kwargs["world_size"]), index))
            backend = "gloo"
        done = real_init(backend, *args, **kwargs)
        if device_id is not None and model.binds_default_group:  # bound, as torch binds it; no current device set
            dist.distributed_c10d._get_default_group().bound_device_id = torch.device("cuda", _ordinal(device_id))
        return done

    def new_group(*args: Any, backend: Any = None, **kwargs: Any) -> Any:
        return real_new_group(*args, backend="gloo" if backend is not None and "nccl" in str(backend) else backend,
                              **kwargs)
    put(dist, "init_process_group", init_process_group)
    put(dist, "new_group", new_group)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            if value is ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def _nccl_comm(store: Any, rank: int, world_size: int, device: int) -> Any:
    """The communicator as NCCL's bootstrap sees it: every member's host, all-gathered through the store."""
    import socket

    from tests.helpers.fake_nccl import Comm

    store.set(f"fake-nccl/host/{rank}", socket.gethostname())
    hosts = [store.get(f"fake-nccl/host/{r}").decode() for r in range(world_size)]
    return Comm(rank, hosts, device=device)


MODEL_ENV = "PREFLIGHT_TEST_CUDA_MODEL"  # JSON: a rank process's model (see install_from_env)


def install_from_env() -> FakeCuda | None:
    """In a rank's process (from a sitecustomize): the model $PREFLIGHT_TEST_CUDA_MODEL describes,
    installed for the process's life; at exit its calls go to `<record>/calls-<RANK>.json`.

    JSON: {"devices": N, "host": host tag for UUIDs, "free": bytes free per device, "rates": {...},
    "slow": {ordinal: factor of its products' slowness}, "mig": {ordinal: a MIG instance's UUID},
    "record": folder, "nccl": NcclHost's fields
    (tests/helpers/fake_nccl.py: this host's NCCL, which then writes its log as communicators form)}.
    """
    import atexit
    import json
    import os

    spec = json.loads(os.environ.get(MODEL_ENV) or "null")
    if not spec:
        return None
    host = str(spec.get("host", os.environ.get("MODEL_HOST", "0")))
    devices = [gpu(i, uuid_prefix=host.rjust(4, "0")[-4:], free=int(spec.get("free", 80 * 2**30)))
               for i in range(int(spec.get("devices", 8)))]
    model = FakeCuda(devices, rates={**FakeCuda.__dataclass_fields__["rates"].default_factory(),  # type: ignore[misc]
                                     **spec.get("rates", {})})
    for ordinal, instance in (spec.get("mig") or {}).items():  # CUDA sees a MIG instance there (its MIG- UUID)
        model.devices[int(ordinal)].update(name=f"{model.devices[int(ordinal)]['name']} MIG 3g.40gb", uuid=instance)
    for ordinal, factor in (spec.get("slow") or {}).items():  # a GPU slow at matrix products
        model.device_rates[int(ordinal)] = {"gemm": model.rates["gemm"] / float(factor)}
    if spec.get("nccl") is not None:  # this host's NCCL (tests/helpers/fake_nccl.NcclHost's fields)
        import socket

        from tests.helpers.fake_nccl import NcclHost, NcclProcess

        model.nccl_log = NcclProcess(NcclHost(socket.gethostname(), **spec["nccl"]))
    installed = model.install()
    installed.__enter__()
    model.installed = installed  # held for the process's life (a collected context would undo the install)
    record = spec.get("record")
    if record:
        def dump() -> None:
            rows = [{"what": c.what, "device": c.device, "named": c.named, "thread": c.thread} for c in model.calls]
            path = os.path.join(record, f"calls-{os.environ.get('RANK', '0')}.json")
            with open(path, "w", encoding="utf-8") as out:
                json.dump({"local_rank": os.environ.get("LOCAL_RANK"), "calls": rows,
                           "reserved": model.reserved}, out)
        atexit.register(dump)
    return model
