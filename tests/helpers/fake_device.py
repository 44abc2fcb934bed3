"""A FAKE of the device probes' one boundary (preflight/probes/device/boundary.TorchDevice) for a GPU.

No GPU exists on CI machines. This object answers what the device family asks a device, from
data: the rate it delivers per figure (TFLOP/s for products, GB/s for copies), on a virtual
clock like tests/helpers/fake_cuda.py's events (a burst's seconds are the work queued during
it divided by the rate: CUDA events measure the stream, not the host); the digests its
correctness product gives, in order; the PCIe link and the NVML samples it reports; a figure
that fails. It is passed where the real device would be (family.run_family's `device`,
device_probes.measure's `device=`); no test patches the family.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from preflight.lib.pci_topology import PciPlace
from preflight.model.device_probe import LINK_FIGURES, DeviceReport, HostLink, NvmlSample
from preflight.probes.device.family import run_family

HEALTHY_H100 = {"gemm_bf16": 798.0, "gemm_fp16": 790.0, "gemm_tf32": 380.0, "copy": 3000.0, "h2d": 53.0, "d2h": 54.0}
GEN5_X16 = HostLink(gen=5, width=16, max_gen=5, max_width=16)


@dataclass
class FakeOperand:
    """What the family holds instead of a tensor: where it lives, its size, its dtype."""

    where: str  # "device" | "host"
    nbytes: int = 0
    n: int = 0
    dtype: Any = None


@dataclass
class FakeDevice:
    """One GPU, answered from data."""

    rates: dict[str, float] = field(default_factory=lambda: dict(HEALTHY_H100))
    name: str = "NVIDIA H100 80GB HBM3"
    link_read: HostLink | None = field(default_factory=lambda: HostLink(5, 16, 5, 16))
    samples: list[NvmlSample] = field(default_factory=list)  # replayed in order, the last one repeated
    digests: list[str] = field(default_factory=lambda: ["d" * 32])  # per correctness product, the last repeated
    checksum: list[float] = field(default_factory=lambda: [1.0] * 8)
    failing: dict[str, str] = field(default_factory=dict)  # figure -> the error its calls raise
    serial_number: str = "1654922000001"
    # the rate of each burst, in order, overriding `rates` (a figure slow in one pass only)
    burst_rates: dict[str, list[float]] = field(default_factory=dict)
    kind: str = "cuda"
    free: int | None = 80 * 2**30  # free memory the family sizes its operands from
    blas_key: str = "cuBLAS 120804 sm_90 132 SMs"
    no_digest: str = ""  # why digests may not be compared (TunableOp), "" when they may
    closed: bool = False
    figure: str = ""  # set by the family as it measures (TorchDevice's sampler reads it)
    place: PciPlace = field(default_factory=PciPlace)  # its PCIe switch and NUMA node
    turns: int = 0  # host-link turns taken (TorchDevice.link_turn)
    sampling_into: DeviceReport | None = None
    sampling_every_s: float = 0.0  # 0: one read during each sized burst; else at most one per this many seconds
    sampling_limit: int = 1 << 30
    last_sample_at: float = float("-inf")
    busy: bool = False  # a burst's work is in flight (NVML then reads a working GPU's clocks)
    idle_samples: int = 0  # NVML reads taken while no burst ran: an idle GPU's clocks, never a loaded one's
    torch: Any = torch
    queued_s: float = 0.0
    products: int = 0
    digested: int = 0
    bursts: dict[str, int] = field(default_factory=dict)
    _current: str = ""

    def dtypes(self) -> dict[str, Any]:
        return {"gemm_bf16": torch.bfloat16, "gemm_fp16": torch.float16, "gemm_tf32": torch.float32}

    def has_host_link(self) -> bool:
        return True

    def matrices(self, n: int, dtype: Any, seed: int) -> tuple[FakeOperand, FakeOperand]:
        return FakeOperand("device", n=n, dtype=dtype), FakeOperand("device", n=n, dtype=dtype)

    def buffers(self, nbytes: int) -> tuple[FakeOperand, FakeOperand]:
        return FakeOperand("device", nbytes), FakeOperand("device", nbytes)

    def host_buffers(self, nbytes: int) -> tuple[FakeOperand, FakeOperand]:
        return FakeOperand("host", nbytes), FakeOperand("device", nbytes)

    def _rate(self, figure: str) -> float:
        if figure in self.failing:
            raise RuntimeError(self.failing[figure])
        queue = self.burst_rates.get(figure)
        if queue:
            return queue[min(self.bursts.get(figure, 0), len(queue) - 1)]
        return self.rates[figure]

    def matmul(self, a: FakeOperand, b: FakeOperand, tf32: bool = False) -> FakeOperand:
        if a.dtype == torch.float32 and not tf32:  # the correctness product
            self.products += 1
            return FakeOperand("device", n=a.n)
        figure = {torch.bfloat16: "gemm_bf16", torch.float16: "gemm_fp16"}.get(a.dtype, "gemm_tf32")
        self._current = figure
        self.queued_s += 2.0 * a.n**3 / (self._rate(figure) * 1e12)
        return FakeOperand("device", n=a.n)

    def copy(self, dst: FakeOperand, src: FakeOperand) -> None:
        figure = "copy" if dst.where == src.where else ("h2d" if src.where == "host" else "d2h")
        self._current = figure
        moved = 2 * dst.nbytes if figure == "copy" else dst.nbytes
        self.queued_s += moved / (self._rate(figure) * 1e9)

    def burst(self, call: Callable[[], Any], iters: int) -> float:
        began = self.queued_s
        self.busy = True
        try:
            for _ in range(iters):
                call()
            if iters > 1:  # sized bursts only: the warm-up and sizing calls are not counted
                self.bursts[self._current] = self.bursts.get(self._current, 0) + 1
                if self.sampling_into is not None and self._sample_due():  # the side thread's reads
                    self._sampled(self.sampling_into)
        finally:
            self.busy = False  # synchronised: the GPU is idle until the next burst
        return self.queued_s - began

    def _sample_due(self) -> bool:
        report = self.sampling_into
        if report is None or len(report.samples) >= self.sampling_limit:
            return False
        now = time.monotonic()
        if now - self.last_sample_at < self.sampling_every_s:
            return False
        self.last_sample_at = now
        return True

    @contextlib.contextmanager
    def link_turn(self) -> Iterator[None]:
        self.turns += 1
        yield

    def figure_turn(self, figure: str) -> contextlib.AbstractContextManager[None]:
        """TorchDevice.figure_turn on a GPU: only the host copies take a turn."""
        return self.link_turn() if figure in LINK_FIGURES else contextlib.nullcontext()

    @contextlib.contextmanager
    def sampling(self, report: DeviceReport, began: float, every_s: float = 0.0,
                 limit: int = 1 << 30) -> Iterator[None]:
        """NVML read while the bursts run (TorchDevice's side thread), here during a sized burst: one per
        burst, or at most one per `every_s` seconds where given; up to `limit` samples in the report."""
        self.sampling_into, self.sampling_every_s, self.sampling_limit = report, every_s, limit
        self.last_sample_at = float("-inf")
        try:
            yield
        finally:
            self.sampling_into = None

    def _sampled(self, report: DeviceReport) -> None:
        if self._current.startswith("gemm"):
            sample = self.sample(0.0)
            if sample is not None:
                report.samples.append(sample)
        elif self._current in LINK_FIGURES and report.link is None:
            report.link = self.link()

    def synchronize(self) -> None:
        pass

    def free_bytes(self) -> int | None:
        return self.free

    def digest_key(self) -> tuple[str, str]:
        return self.blas_key, self.no_digest

    def close(self) -> None:
        self.closed = True

    def digest(self, tensor: FakeOperand) -> tuple[str, list[float]]:
        value = self.digests[min(self.digested, len(self.digests) - 1)]
        self.digested += 1
        return value, list(self.checksum)

    def sample(self, t_s: float) -> NvmlSample | None:
        if not self.busy:
            self.idle_samples += 1
        if not self.samples:
            return None
        index = min(sum(self.bursts.values()), len(self.samples)) - 1
        return self.samples[max(index, 0)]

    def link(self) -> HostLink | None:
        return self.link_read

    def serial(self) -> str:
        return self.serial_number


def measure(rank: int, device: FakeDevice, host: str = "") -> DeviceReport:
    """One rank's report from a fake GPU, as device_probes.measure would publish it (8 GPUs per node)."""
    report = DeviceReport(rank, host or f"node{rank // 8}", "cuda", name=device.name, index=rank % 8,
                          uuid=f"GPU-{rank:04d}", serial=device.serial(), software="torch 2.13 cuda 12.8")
    return run_family(device, report, budget_s=5.0)
