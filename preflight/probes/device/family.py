"""The device probes on one rank: matrix throughput, memory copy, host link and a correctness digest.

Run by every rank on its own bound device (the session's GPU, or the CPU under gloo), at the
same time, before the collectives. Each figure is timed nccl-tests-style: a warm-up call, one
call to size the burst, then bursts of back-to-back calls with one synchronisation each
(CUDA events on a GPU; on CPU the thread's CPU time, since the ranks of a host share its
cores), `device/boundary.TorchDevice.burst`. Every figure is measured in two
passes, the second after all the others, so that rank 0 blames only a device slow in both
(judge.py): a moment of noise is not a slow device.

The family fits a time budget (`--device-budget`, default DEFAULT_BUDGET_S per device kind):
every figure's passes share it equally, so the whole family stays within it, whatever the
device's speed. Sizes saturate an H100-class GPU (8192^3 products, 512 MiB copies) and stay
small on CPU, where the ranks of a host share cores.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from msgspec import Struct

from preflight.lib.errors import one_line
from preflight.model.device_probe import LINK_FIGURES, DeviceReport, Measured
from preflight.probes.device.boundary import SDC_SEED

# The timed part: on a GPU 4 s, which with allocations, cuBLAS's first call and pinning keeps the
# family under ~5 s; on CPU 0.03 s of the thread's CPU time (one fp32 figure and one copy).
DEFAULT_BUDGET_S = {"cuda": 4.0, "cpu": 0.03}
BURSTS = 5  # per figure and pass: a median of 5 is not moved by one preempted burst
PASSES = 2
MAX_SUSTAIN_SAMPLES = 200  # NVML samples of --device-sustain, spread over its length


class Sizes(Struct, frozen=True):
    """Operand sizes of one device kind."""

    gemm_n: int  # matrix side of the throughput products
    copy_bytes: int  # per device-to-device copy (read once, written once)
    host_bytes: int  # per pinned host copy
    sdc_n: int  # matrix side of the correctness product


SIZES = {
    "cuda": Sizes(gemm_n=8192, copy_bytes=512 * 2**20, host_bytes=256 * 2**20, sdc_n=2048),
    "cpu": Sizes(gemm_n=192, copy_bytes=4 * 2**20, host_bytes=0, sdc_n=128),
}
# In a training process the GPU is mostly the trainer's: the operands take at most this share of
# what is free (the rest stays for the trainer, NCCL and cuBLAS's workspace), halving every size
# until they fit, never below the floor (a smaller product measures launch overhead, not the
# device): below it every figure is skipped with the reason, never an out-of-memory error.
MEMORY_SHARE = 0.25
FLOOR = Sizes(gemm_n=256, copy_bytes=16 * 2**20, host_bytes=16 * 2**20, sdc_n=256)


def bytes_needed(sizes: Sizes, host_link: bool = True) -> int:
    """Device memory the family holds at once: bf16 and fp16 operand pairs (2 bytes each) and the tf32
    pair (4), one fp32 temporary while an operand is made and one result; the copy pair; the host
    copies' device buffers; the correctness product's operands and its two results."""
    n2 = sizes.gemm_n**2
    host = 2 * sizes.host_bytes if host_link else 0
    return 2 * n2 * (2 + 2 + 4) + 4 * n2 + 4 * n2 + 2 * sizes.copy_bytes + host + 4 * 4 * sizes.sdc_n**2


def fit(sizes: Sizes, free_bytes: int | None, host_link: bool = True) -> tuple[Sizes | None, str]:
    """The sizes that fit MEMORY_SHARE of free_bytes (None: unknown, the sizes as they are), and what was
    done: "" when unchanged, why they shrank, or why nothing fits (then None)."""
    if free_bytes is None:
        return sizes, ""
    allowed = int(free_bytes * MEMORY_SHARE)
    fitted = sizes
    while bytes_needed(fitted, host_link) > allowed:
        smaller = Sizes(max(FLOOR.gemm_n, fitted.gemm_n // 2), max(FLOOR.copy_bytes, fitted.copy_bytes // 2),
                        max(FLOOR.host_bytes, fitted.host_bytes // 2) if fitted.host_bytes else 0,
                        max(FLOOR.sdc_n, min(fitted.sdc_n, fitted.gemm_n // 2)))
        if smaller == fitted:  # every size at its floor
            break
        fitted = smaller
    free_mib = free_bytes / 2**20
    if bytes_needed(fitted, host_link) > allowed:
        return None, (f"only {free_mib:.0f} MiB free on the device: the smallest operands "
                      f"({bytes_needed(fitted, host_link) / 2**20:.0f} MiB) exceed {MEMORY_SHARE:g} of it")
    if fitted != sizes:
        return fitted, (f"operands shrunk to {fitted.gemm_n}^3 products and {fitted.copy_bytes // 2**20} MiB copies: "
                        f"{free_mib:.0f} MiB free on the device")
    return fitted, ""


@contextlib.contextmanager
def _one_thread(device: Any) -> Iterator[None]:
    """On CPU, one intra-op thread: the ranks of a host share its cores, and a product spread over
    threads other ranks also use measures the scheduler, not the device."""
    if device.kind != "cpu":
        yield
        return
    torch = device.torch
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def run_family(device: Any, report: DeviceReport, budget_s: float | None = None, sustain_s: float = 0.0,
               sizes: Sizes | None = None) -> DeviceReport:
    """Measure every figure of `device` into `report` (filled in place and returned); never raises.

    A figure that raises is recorded in report.errors (could not run, never a pass); the others
    are still measured.
    """
    began = time.monotonic()
    budget = budget_s if budget_s is not None else DEFAULT_BUDGET_S.get(device.kind, 1.0)
    if not device.has_host_link():
        report.skipped.update({"h2d": "no host link on CPU", "d2h": "no host link on CPU"})
    elif report.uuid.startswith("MIG-"):  # torch names a MIG instance by its own UUID
        why = (f"{report.uuid} is a MIG instance: its GPU's host link is shared with the GPU's other instances, "
               "whose copies it would measure too")
        report.skipped.update({"h2d": why, "d2h": why})
    full = sizes or SIZES.get(device.kind, SIZES["cpu"])
    try:
        sizes, why = fit(full, device.free_bytes(), device.has_host_link())
    except Exception as exc:  # the device cannot say how much memory is free: measure at full size
        sizes, why = full, f"free memory unknown ({type(exc).__name__}: {one_line(exc)})"[:300]
    if sizes is None:
        names = [*device.dtypes(), "copy", "sdc", *(LINK_FIGURES if device.has_host_link() else ())]
        report.skipped.update({name: why for name in names})
        report.elapsed_s = time.monotonic() - began
        return report
    if why:
        report.sized = why  # shrunk figures are compared with siblings of their size only, never with a peak
    figures = {name: figure for name, figure in _figures(device, sizes).items() if name not in report.skipped}
    report.pcie_switch, report.numa_node = device.place.switch, device.place.numa
    slot_s = budget * 0.9 / max(1, len(figures) * PASSES)
    with _one_thread(device):
        prepared: dict[str, tuple[Measured, Callable[[], Any]]] = {}
        for name, (size, make) in figures.items():
            try:
                prepared[name] = (Measured(name, size=size), make())
            except Exception as exc:  # out of memory, a dtype this device lacks
                report.errors[name] = f"{type(exc).__name__}: {one_line(exc)}"[:300]
        for pass_index in range(PASSES):
            if pass_index == 0:
                _correctness(device, report, sizes)
            # NVML read WHILE the bursts run (a side thread on a GPU): after a burst the GPU is idle
            # again, and its clocks and throttle reasons are an idle GPU's.
            with device.sampling(report, began):
                _pass(device, prepared, pass_index, slot_s, report, began)
        if sustain_s > 0 and "gemm_bf16" in prepared:
            _sustain(device, prepared["gemm_bf16"], sustain_s, report, began)
    report.measured = [m for m, _ in prepared.values()]
    report.elapsed_s = time.monotonic() - began
    return report


def _pass(device: Any, prepared: dict[str, tuple[Measured, Callable[[], Any]]], pass_index: int, slot_s: float,
          report: DeviceReport, began: float) -> None:
    """One pass over every prepared figure; a figure that raises is dropped with its reason."""
    for name, (measured, call) in list(prepared.items()):
        try:
            # What a host's ranks share is measured in turns (Device.figure_turn): the host copies of GPUs
            # behind one PCIe switch (two sharing an uplink each read ~0.4 of it), every figure of a CPU.
            with device.figure_turn(name):
                values = _bursts(device, call, slot_s, measured, report, began)
        except Exception as exc:
            report.errors[name] = f"{type(exc).__name__}: {one_line(exc)}"[:300]
            del prepared[name]
            continue
        (measured.bursts if pass_index == 0 else measured.confirm).extend(values)


def _figures(device: Any, sizes: Sizes) -> dict[str, tuple[int, Callable[[], Callable[[], Any]]]]:
    """Figure name -> (size, a maker of the zero-argument call one burst repeats)."""
    out: dict[str, tuple[int, Callable[[], Callable[[], Any]]]] = {}
    for name, dtype in device.dtypes().items():
        def make(dtype: Any = dtype, tf32: bool = name == "gemm_tf32") -> Callable[[], Any]:
            a, b = device.matrices(sizes.gemm_n, dtype, seed=7)
            return lambda: device.matmul(a, b, tf32=tf32)
        out[name] = (sizes.gemm_n, make)

    def make_copy() -> Callable[[], Any]:
        dst, src = device.buffers(sizes.copy_bytes)
        return lambda: device.copy(dst, src)
    out["copy"] = (sizes.copy_bytes, make_copy)
    if device.has_host_link():
        def make_h2d() -> Callable[[], Any]:
            host, dev = device.host_buffers(sizes.host_bytes)
            return lambda: device.copy(dev, host)

        def make_d2h() -> Callable[[], Any]:
            host, dev = device.host_buffers(sizes.host_bytes)
            return lambda: device.copy(host, dev)
        out["h2d"] = (sizes.host_bytes, make_h2d)
        out["d2h"] = (sizes.host_bytes, make_d2h)
    return out


def rate(name: str, size: int, iters: int, seconds: float) -> float:
    """TFLOP/s of `iters` n^3 products (2 n^3 flops each), or GB/s of copies.

    A device copy reads and writes every byte (2 x size, as bandwidth tools count it); a host
    copy crosses the link once (size).
    """
    if seconds <= 0:
        return 0.0
    if name.startswith("gemm"):
        return 2.0 * size**3 * iters / seconds / 1e12
    moved = 2 * size if name == "copy" else size
    return moved * iters / seconds / 1e9


def _bursts(device: Any, call: Callable[[], Any], slot_s: float, measured: Measured, report: DeviceReport,
            began: float) -> list[float]:
    """BURSTS timed bursts of `call` filling about slot_s (NVML is sampled meanwhile: Device.sampling)."""
    device.figure = measured.name  # what the sampler reads the link and clocks under
    device.burst(call, 1)  # warm-up: kernels chosen, memory touched
    if not measured.iters:
        one = max(device.burst(call, 1), 1e-6)
        measured.iters = max(1, min(100_000, int(slot_s / BURSTS / one)))
    values = []
    for _ in range(BURSTS):
        seconds = device.burst(call, measured.iters)
        values.append(rate(measured.name, measured.size, measured.iters, seconds))
    device.figure = ""
    return values


def _sustain(device: Any, prepared: tuple[Measured, Callable[[], Any]], sustain_s: float, report: DeviceReport,
             began: float) -> None:
    """`--device-sustain`: continuous bf16 products for sustain_s, NVML sampled by the side thread WHILE they
    run (Device.sampling), every sustain_s / MAX_SUSTAIN_SAMPLES (at least 0.25 s): a read after a burst's
    synchronize would see an idle GPU's clocks, power and throttle reasons."""
    measured, call = prepared
    every_s = max(0.25, sustain_s / MAX_SUSTAIN_SAMPLES)  # a bounded report, however long the load
    device.figure = "gemm_sustain"
    try:
        with device.sampling(report, began, every_s=every_s, limit=len(report.samples) + MAX_SUSTAIN_SAMPLES):
            until = time.monotonic() + sustain_s
            while time.monotonic() < until:
                device.burst(call, measured.iters)
    finally:
        device.figure = ""


def _correctness(device: Any, report: DeviceReport, sizes: Sizes) -> None:
    """One deterministic product, twice: its digest travels to rank 0, which compares devices of one model."""
    torch = device.torch
    try:
        a, b = device.matrices(sizes.sdc_n, torch.float32, seed=SDC_SEED)
        first = device.matmul(a, b, tf32=False)
        second = device.matmul(a, b, tf32=False)
        device.synchronize()
        # The key after the products: the BLAS library that computed them is loaded by now.
        key, why_not = device.digest_key()
        if why_not:  # kernels chosen per rank (TunableOp): equal inputs need not give equal bits
            report.skipped["sdc"] = why_not
            return
        report.sdc_key = key
        report.sdc_digest, report.sdc_checksum = device.digest(first)
        report.sdc_repeat_digest, _ = device.digest(second)
        report.sdc_method = f"fp32 matmul {sizes.sdc_n}x{sizes.sdc_n}, inputs seeded {SDC_SEED}, tf32 off"
    except Exception as exc:
        report.errors["sdc"] = f"{type(exc).__name__}: {one_line(exc)}"[:300]
