"""Device probe fidelity: the family's matrix and copy figures against a bare torch loop, same process.

The bare loop is what anyone would write: synchronise, read the clock, N back-to-back calls of
torch.matmul (or Tensor.copy_), synchronise, read the clock (on CPU the thread's CPU time, the
probe's own clock there; on a GPU the wall clock around torch.cuda.synchronize). N is sized to
take as long as the probe's whole figure. preflight's figure comes from its own code path
(device/boundary.TorchDevice + device/family.run_family: best burst of two passes of 5).
Both run in this process, alternating, ROUNDS times; the medians and their ratio are printed
(goal: >= 0.97 on a GPU). Not a test.

    python benchmarks/device_fidelity.py [--device cpu|cuda] [--rounds 5] [--budget S]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from preflight.model.device_probe import DeviceReport
from preflight.probes.device.boundary import TorchDevice
from preflight.probes.device.family import SIZES, rate, run_family


def _bare(kind: str, call: Callable[[], Any], seconds: float) -> tuple[int, float]:
    """(iterations, seconds) of one plain loop lasting about `seconds`."""
    clock = time.perf_counter if kind == "cuda" else time.thread_time
    sync = torch.cuda.synchronize if kind == "cuda" else (lambda: None)
    call()
    sync()
    began = clock()
    call()
    sync()
    one = max(clock() - began, 1e-6)
    iters = max(1, int(seconds / one))
    sync()
    began = clock()
    for _ in range(iters):
        call()
    sync()
    return iters, clock() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=None, help="the family's budget (default: its own)")
    args = parser.parse_args()
    kind = args.device
    if kind == "cuda" and not torch.cuda.is_available():
        print("device_fidelity.py --device cuda needs a GPU: torch sees no CUDA device "
                         "(run --device cpu here, or on the device machine)", file=sys.stderr)
        raise SystemExit(2)
    device = TorchDevice(kind, 0 if kind == "cuda" else None)
    if kind == "cuda":
        torch.cuda.set_device(0)
    sizes = SIZES[kind]
    headline = "gemm_bf16" if kind == "cuda" else "gemm_fp32"
    dtype = device.dtypes()[headline]
    a, b = device.matrices(sizes.gemm_n, dtype, seed=7)
    dst, src = device.buffers(sizes.copy_bytes)
    probe: dict[str, list[float]] = {headline: [], "copy": []}
    bare: dict[str, list[float]] = {headline: [], "copy": []}
    walls: list[float] = []
    torch.set_num_threads(1)  # as the family runs on CPU
    for _ in range(args.rounds):
        began = time.monotonic()
        report = run_family(device, DeviceReport(0, "", kind), args.budget)
        walls.append(time.monotonic() - began)
        for name in probe:
            measured = report.figure(name)
            probe[name].append(measured.value if measured else 0.0)
        per_figure = report.elapsed_s / max(1, len(report.measured)) / 2  # one pass of one figure
        iters, seconds = _bare(kind, lambda: torch.matmul(a, b), per_figure)
        bare[headline].append(rate(headline, sizes.gemm_n, iters, seconds))
        iters, seconds = _bare(kind, lambda: dst.copy_(src), per_figure)
        bare["copy"].append(rate("copy", sizes.copy_bytes, iters, seconds))
    name = torch.cuda.get_device_name(0) if kind == "cuda" else "cpu"
    print(f"device fidelity on {name}, {args.rounds} alternating rounds (medians); family wall time per rank "
          f"{statistics.median(walls):.3f} s (min {min(walls):.3f}, max {max(walls):.3f})")
    print("| figure | unit | preflight | bare loop | ratio |")
    print("|---|---|---|---|---|")
    for figure in probe:
        mine, theirs = statistics.median(probe[figure]), statistics.median(bare[figure])
        unit = "TFLOP/s" if figure.startswith("gemm") else "GB/s"
        print(f"| {figure} | {unit} | {mine:.4g} | {theirs:.4g} | {mine / theirs:.3f} |")


if __name__ == "__main__":
    main()
