"""Issue 43 on a real GPU: what the CUDA and NVML models stood in for, checked against the device itself.

    python benchmarks/node_wave2.py            # on the device machine (benchmarks/gpu_session.sh runs it)

One line per property, "ok" or "DIFFERS" with what was seen; exit 0 when every property held, 1 when
one did not, 2 without a GPU. The properties (docs/verification.md, "The real node, wave 2"):
- events: a query right after queueing work is False and elapsed_time before completion raises (the
  model's rules of time, tests/helpers/test_fake_cuda_time.py);
- identity: every visible CUDA ordinal's PCI bus id (torch) is the one lib/cuda_visible.py maps it to
  from NVML, under CUDA_DEVICE_ORDER unset and PCI_BUS_ID;
- loaded libraries: lib/loaded_libraries.py finds libcublas (and NCCL, cuDNN where loaded) and their
  versions agree with torch's own (torch.cuda.nccl.version(), torch.backends.cudnn.version());
- pinned memory: the family's pinned host bytes go back on close (torch.cuda.host_memory_stats);
- sustained load: NVML's SM clock during --device-sustain is the loaded clock, not an idle one;
- device_id: a trainer that binds only through init_process_group(device_id=cuda:K) is probed on K.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

RESULTS: list[tuple[str, bool, str]] = []


def say(name: str, ok: bool, seen: str) -> None:
    """One property's line."""
    RESULTS.append((name, ok, seen))
    print(f"{name}: {'ok' if ok else 'DIFFERS'}: {seen}", flush=True)


def events(torch: Any) -> None:
    """CUDA's own answer to what the model says about an incomplete event."""
    a = torch.randn(8192, 8192, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        a @ a
    end.record()
    queried = end.query()
    try:
        start.elapsed_time(end)
        raised = ""
    except RuntimeError as exc:
        raised = str(exc).splitlines()[0]
    end.synchronize()
    # torch >= 2.x checks completion itself ("Both events must be completed ..."), CUDA says "not ready".
    say("events", not queried and ("must be completed" in raised or "not ready" in raised),
        f"query right after queueing: {queried}; elapsed_time before completion: {raised or 'returned'}")


def identity(torch: Any) -> None:
    """torch's bus id of each ordinal against cuda_visible's mapping from NVML, under both orders."""
    from preflight.lib import nvml_source
    from preflight.steps.gather.gpu_health import visible_devices

    nvml, why = nvml_source.open_nvml(deadline_s=30)
    if nvml is None:
        say("identity", False, f"NVML unavailable: {why}")
        return
    try:
        mapped, note = visible_devices(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"),
                                       os.environ.get("CUDA_DEVICE_ORDER"))
    finally:
        nvml.shutdown()
    from_torch = []
    for ordinal in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(ordinal)
        from_torch.append(f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0")
    mine = [v.bus_id.upper() for v in mapped]
    say(f"identity (CUDA_DEVICE_ORDER={os.environ.get('CUDA_DEVICE_ORDER', 'unset')})", mine == from_torch,
        f"torch {from_torch}, NVML mapped {mine}{'; ' + note if note else ''}")


def libraries(torch: Any) -> None:
    """The loaded libraries' own versions against torch's."""
    from preflight.lib import loaded_libraries

    a = torch.randn(256, 256, device="cuda")
    (a @ a).sum().item()  # cuBLAS loaded and used
    found = loaded_libraries.loaded()
    cublas = found.get("cublas")
    nccl = found.get("nccl")
    torch_nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else ""
    cudnn, torch_cudnn = found.get("cudnn"), torch.backends.cudnn.version()  # the runtime cudnnGetVersion, an int
    cudnn_ok = cudnn is None or torch_cudnn is None or cudnn.version == loaded_libraries.cudnn_version(torch_cudnn)
    ok = cublas is not None and bool(cublas.version) and (nccl is None or nccl.version == torch_nccl) and cudnn_ok
    say("loaded libraries", ok, f"{ {k: (v.path, v.version) for k, v in found.items()} }; torch cuda "
        f"{torch.version.cuda}, nccl {torch_nccl}, cudnn {torch.backends.cudnn.version()}")


def pinned_and_sustain(torch: Any) -> None:
    """The family on GPU 0 with a sustained load: pinned bytes back after close, NVML clocks under load."""
    from preflight.model.device_probe import DeviceReport
    from preflight.probes.device.boundary import open_device
    from preflight.probes.device.family import run_family

    torch.cuda.set_device(0)
    p = torch.cuda.get_device_properties(0)
    bus = f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0"
    device = open_device("cuda", 0, pci_bus_id=bus, host="wave2")
    time.sleep(2.0)  # the GPU settles from whatever ran before (its clocks stay up a while after work)
    idle = device.sample(0.0)
    report = run_family(device, DeviceReport(0, "wave2", "cuda"), budget_s=2.0, sustain_s=3.0)
    # allocated_bytes: pinned blocks the host allocator owns, active and cached (torch's docs)
    cached = torch.cuda.host_memory_stats().get("allocated_bytes.current", -1)
    device.close()
    left = torch.cuda.host_memory_stats().get("allocated_bytes.current", -1)
    say("pinned memory given back", left == 0, f"pinned host bytes before close {cached}, after {left}")
    # Under load the power draw is what tells: an H200's SM clock stays at its maximum for a while after
    # work and drops under sustained load (1980 -> 1425 MHz seen), so clocks alone prove nothing.
    watts = [s.power_w for s in report.samples[-20:] if getattr(s, "power_w", None)]
    clocks = [s.sm_clock_mhz for s in report.samples[-20:] if getattr(s, "sm_clock_mhz", None)]
    idle_w = getattr(idle, "power_w", None) if idle is not None else None
    say("sustained load sampled under load", bool(watts) and idle_w is not None and min(watts) > 1.5 * idle_w,
        f"idle {idle_w} W, SM clock {getattr(idle, 'sm_clock_mhz', None)} MHz; last sustained samples "
        f"{[round(w) for w in watts[:8]]} W, {clocks[:8]} MHz; errors {report.errors}")


def device_id_binding(torch: Any) -> None:
    """A one-rank trainer that binds the last GPU only through device_id (no set_device)."""
    import torch.distributed as dist

    from preflight import api

    last = torch.cuda.device_count() - 1
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29600 + os.getpid() % 1000))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", last))
    try:
        index = api.bound_device_index()
        report = api.check(only=["gpu-probe"], device_budget_s=1.0, quiet=True, on_failure="return")
        rows = [(r.index, r.uuid) for r in report.device_probes]
        ok = index == last and [i for i, _ in rows] == [last]
        say("device_id binding", ok, f"bound device {index} (expected {last}); measured {rows}")
    finally:
        dist.destroy_process_group()


def main() -> int:
    """Every property, each on its own (one failing never hides the rest)."""
    import torch

    if not torch.cuda.is_available():
        print("node_wave2.py needs a GPU: torch sees no CUDA device (run it on the device machine)", file=sys.stderr)
        return 2
    for step in (events, identity, libraries, pinned_and_sustain, device_id_binding):
        began = time.monotonic()
        try:
            step(torch)
        except Exception as exc:  # a report line, never a traceback that hides the rest
            say(step.__name__, False, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        print(f"  ({step.__name__}: {time.monotonic() - began:.1f} s)", flush=True)
    return 0 if all(ok for _, ok, _ in RESULTS) else 1


if __name__ == "__main__":
    sys.exit(main())
