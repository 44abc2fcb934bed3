"""Published peak figures per GPU model (SKU), and the fraction of each a healthy device reaches.

A device's figure is judged against its SKU's peak only when its model is in this table (by the
name torch reports); an unknown GPU and every CPU get none: nothing is invented. Sources and
the reasoning behind each fraction are in docs/probes.md ("SKU peaks").

Peaks are dense (no sparsity) math rates and the memory system's total bandwidth; a device
copy counts bytes read + written, so it is judged against the total. A host copy crosses one
direction of the PCIe link, judged against the link NVML reports (generation x width), never
against the slot's maximum: a Gen5 x16 slot moving Gen3 speeds is slow against Gen5.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sku:
    """One GPU model's published peaks: TFLOP/s per product dtype, memory GB/s."""

    label: str
    match: tuple[str, ...]  # every part must be in torch's device name (lower case)
    tflops: dict[str, float]  # figure name -> dense peak
    memory_gbps: float
    source: str


SKUS = (
    Sku("H100 SXM5", ("h100", "hbm3"), {"gemm_bf16": 989.0, "gemm_fp16": 989.0, "gemm_tf32": 494.7}, 3350.0,
        "NVIDIA H100 datasheet (SXM5)"),
    Sku("H100 PCIe", ("h100", "pcie"), {"gemm_bf16": 756.0, "gemm_fp16": 756.0, "gemm_tf32": 378.0}, 2000.0,
        "NVIDIA H100 datasheet (PCIe)"),
    Sku("H200", ("h200",), {"gemm_bf16": 989.0, "gemm_fp16": 989.0, "gemm_tf32": 494.7}, 4800.0,
        "NVIDIA H200 datasheet (SXM)"),
    Sku("A100 SXM4 80GB", ("a100", "sxm4", "80gb"), {"gemm_bf16": 312.0, "gemm_fp16": 312.0, "gemm_tf32": 156.0},
        2039.0, "NVIDIA A100 datasheet (SXM4 80GB)"),
    Sku("A100 SXM4 40GB", ("a100", "sxm4", "40gb"), {"gemm_bf16": 312.0, "gemm_fp16": 312.0, "gemm_tf32": 156.0},
        1555.0, "NVIDIA A100 datasheet (SXM4 40GB)"),
)

# A healthy device's share of the peak: below FRACTION x peak is a finding. Measured on a healthy
# H100 80GB HBM3 (issue 26's anchors): an 8192^3 bf16 product at ~798 of 989 TFLOP/s (0.81), a
# device copy at ~3.0 of 3.35 TB/s (0.90). The thresholds leave ~25% below those for clocks,
# cooling and cuBLAS versions: a finding means a device well under what its kind does.
FRACTION = {"gemm": 0.6, "copy": 0.7, "link": 0.5}

# PCIe payload rate per lane and direction, GB/s, by generation (after line encoding):
# Gen3 8 GT/s 128b/130b, Gen4 16, Gen5 32, Gen6 64 GT/s (PAM4, FLIT).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def find(name: str) -> Sku | None:
    """The SKU whose match parts are all in `name` (torch's device name), None when unknown."""
    lower = name.lower()
    return next((sku for sku in SKUS if all(part in lower for part in sku.match)), None)


def peak(figure: str, name: str, link_gen: int | None = None,
         link_width: int | None = None) -> tuple[float, str] | None:
    """(peak, source) of one figure on a device named `name`, or None when nothing is known."""
    if figure in ("h2d", "d2h"):
        if not link_gen or not link_width or link_gen not in PCIE_LANE_GBPS:
            return None
        return PCIE_LANE_GBPS[link_gen] * link_width, f"PCIe Gen{link_gen} x{link_width} (NVML)"
    sku = find(name)
    if sku is None:
        return None
    if figure == "copy":
        return sku.memory_gbps, sku.source
    if figure in sku.tflops:
        return sku.tflops[figure], sku.source
    return None


def fraction(figure: str) -> float:
    """The share of the peak below which a figure is a finding."""
    if figure.startswith("gemm"):
        return FRACTION["gemm"]
    return FRACTION["copy"] if figure == "copy" else FRACTION["link"]
