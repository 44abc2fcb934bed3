"""A FAKE of the CUDA boundary the probes take (preflight/probes/session.py's `cuda=`, default torch.cuda).

No GPU exists on CI machines. This object answers the handful of torch.cuda calls the probe
session and timing make, from data: the devices this process sees (CUDA ordinals, in order),
which of them are lost, and a virtual clock for CUDA events. It is injected at that one
boundary (session.bind_device / decide_backend / open_session / timing.timed_loop take it);
no test patches the internals. Whether this torch has NCCL is part of the boundary too
(`nccl_available`), since the CPU wheel CI uses has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


def h100(n: int, uuid_prefix: str = "0000") -> dict[str, Any]:
    """One H100's properties as torch reports them (bus ids as NVML shows 18, 2A, 3A, ...)."""
    bus = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB][n % 8]
    return {"name": "NVIDIA H100 80GB HBM3", "pci_domain_id": 0, "pci_bus_id": bus, "pci_device_id": 0,
            "uuid": f"{uuid_prefix}{n:04d}-1111-2222-3333-444444444444", "total_memory": 85 * 2**30}


# Replayed machines: CUDA_VISIBLE_DEVICES as the process sees it.
EIGHT_GPUS = [h100(i) for i in range(8)]  # a node's 8 GPUs, every rank sees all of them
ONE_PER_TASK = {task: [h100(task)] for task in range(8)}  # srun --gpus-per-task=1: task t sees only its own GPU
TWO_OF_EIGHT = [h100(0), h100(1)]  # a CUDA_VISIBLE_DEVICES that fits neither rule


class FakeEvent:
    """A CUDA event on the fake's virtual clock: record() stamps the time all queued work ends."""

    def __init__(self, cuda: FakeCuda, enable_timing: bool = False) -> None:
        self.cuda, self.stamp = cuda, None
        cuda.events.append(self)

    def record(self) -> None:
        self.stamp = self.cuda.queued_until

    def query(self) -> bool:
        self.cuda.queries += 1
        return not self.cuda.stuck

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.stamp - self.stamp) * 1e3  # milliseconds, as torch.cuda.Event gives


@dataclass
class FakeWork:
    """A collective queued on the fake stream: wait() makes the stream wait, never the host."""

    cuda: FakeCuda
    seconds: float

    def __post_init__(self) -> None:
        self.cuda.queued_until += self.seconds

    def wait(self, timeout: Any = None) -> bool:
        self.cuda.stream_waits += 1
        return True


@dataclass
class FakeCuda:
    """The devices one process sees, by CUDA ordinal; `lost` ordinals fail like a GPU that fell off the bus."""

    devices: list[dict[str, Any]]
    lost: set[int] = field(default_factory=set)
    nccl: bool = True
    stuck: bool = False  # every event query says "not yet" (a hung collective)
    current: int | None = None
    queued_until: float = 0.0
    events: list[FakeEvent] = field(default_factory=list)
    queries: int = 0
    stream_waits: int = 0

    def nccl_available(self) -> bool:
        return self.nccl

    def is_available(self) -> bool:
        return bool(self.devices)

    def device_count(self) -> int:
        return len(self.devices)

    def set_device(self, index: int) -> None:
        self._check(index)
        self.current = index

    def get_device_properties(self, index: int) -> SimpleNamespace:
        self._check(index)
        return SimpleNamespace(**self.devices[index])

    def Event(self, enable_timing: bool = False) -> FakeEvent:
        return FakeEvent(self, enable_timing)

    def _check(self, index: int) -> None:
        if not 0 <= index < len(self.devices):
            raise RuntimeError(f"CUDA error: invalid device ordinal {index}")
        if index in self.lost:
            raise RuntimeError("CUDA error: GPU is lost (cudaErrorDevicesUnavailable)")
