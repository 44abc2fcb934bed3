"""The one hardware table: each GPU model (SKU) with its names, peaks, memory, PCIe and NVLink.

Every reader of hardware facts reads it: the device judge (a figure against its SKU's peak),
the collective expectations (an NVLink group's profile) and the nominal rates (NVLink per
link, PCIe per lane). Sources and the reasoning behind the fractions are in docs/probes.md
("SKU peaks") and docs/expectations.md; `preflight hardware` prints the table with its
sources, `preflight hardware --match NAME` says which row a name matches and why.

Names are matched by WHOLE TOKENS (the name lower-cased, split on anything not a letter or
digit), for torch's names and NVML's alike: "h200" is not in "NVIDIA GH200 480GB" (its
token is "gh200"), "a10" is not "a100". A row needs all of its `needs` tokens and none of its
`refuses`; of several rows that match, the one needing the most tokens wins (H200 NVL over
H200). A MIG slice (token "mig") matches no row: its peaks are a fraction of the GPU's that
depends on the profile's SMs and memory slices, and none is invented.

Peaks are dense (no sparsity) math rates and the memory system's total bandwidth; a device
copy counts bytes read + written, so it is judged against the total. A host copy crosses one
direction of the PCIe link, judged against the link NVML reports (generation x width), never
against the slot's maximum: a Gen5 x16 slot moving Gen3 speeds is slow against Gen5.
"""

from __future__ import annotations

import re

from msgspec import Struct, field

from preflight.model.device_probe import LINK_FIGURES


class Sku(Struct, frozen=True):
    """One GPU model: how its names read, its published peaks and links."""

    label: str
    needs: tuple[str, ...]  # whole tokens every name of this model has
    tflops: dict[str, float]  # figure name -> dense peak, TFLOP/s
    memory_gbps: float  # memory bandwidth, GB/s (read + write total)
    memory_gb: int
    pcie: tuple[int, int]  # (generation, lanes) of its host link
    source: str
    refuses: tuple[str, ...] = ()  # tokens that make a name another model (H100 "nvl", "pcie")
    nvlink: tuple[int, int] | None = None  # (generation, links) on the SXM/OAM board; None: none, or bridges only
    torch_names: tuple[str, ...] = ()  # names torch reports (cudaDeviceProp.name), as seen or documented
    nvml_names: tuple[str, ...] = field(default=())  # names NVML reports (nvmlDeviceGetName)


def _gemm(bf16: float, tf32: float) -> dict[str, float]:
    return {"gemm_bf16": bf16, "gemm_fp16": bf16, "gemm_tf32": tf32}


SKUS = (
    Sku("H100 SXM5 80GB", ("h100",), _gemm(989.0, 494.7), 3350.0, 80, (5, 16), "NVIDIA H100 datasheet (SXM5)",
        refuses=("pcie", "nvl"), nvlink=(4, 18), torch_names=("NVIDIA H100 80GB HBM3",),
        nvml_names=("NVIDIA H100 80GB HBM3",)),
    Sku("H100 PCIe", ("h100", "pcie"), _gemm(756.0, 378.0), 2000.0, 80, (5, 16), "NVIDIA H100 datasheet (PCIe)",
        torch_names=("NVIDIA H100 PCIe",), nvml_names=("NVIDIA H100 PCIe",)),
    Sku("H100 NVL", ("h100", "nvl"), _gemm(835.0, 417.5), 3900.0, 94, (5, 16), "NVIDIA H100 datasheet (NVL)",
        torch_names=("NVIDIA H100 NVL",), nvml_names=("NVIDIA H100 NVL",)),
    Sku("H200 SXM", ("h200",), _gemm(989.0, 494.7), 4800.0, 141, (5, 16), "NVIDIA H200 datasheet (SXM)",
        refuses=("nvl",), nvlink=(4, 18), torch_names=("NVIDIA H200",), nvml_names=("NVIDIA H200",)),
    Sku("H200 NVL", ("h200", "nvl"), _gemm(835.0, 417.5), 4800.0, 141, (5, 16), "NVIDIA H200 datasheet (NVL)",
        torch_names=("NVIDIA H200 NVL",), nvml_names=("NVIDIA H200 NVL",)),
    Sku("GH200 96GB HBM3", ("gh200",), _gemm(989.0, 494.7), 4000.0, 96, (5, 16),
        "NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3)", refuses=("hbm3e", "144g", "144gb"),
        torch_names=("NVIDIA GH200 480GB",), nvml_names=("NVIDIA GH200 480GB",)),
    Sku("GH200 144GB HBM3e", ("gh200", "hbm3e"), _gemm(989.0, 494.7), 4900.0, 144, (5, 16),
        "NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3e)",
        torch_names=("NVIDIA GH200 144G HBM3e",), nvml_names=("NVIDIA GH200 144G HBM3e",)),
    Sku("H20", ("h20",), _gemm(148.0, 74.0), 4000.0, 96, (5, 16), "NVIDIA H20 product brief",
        nvlink=(4, 18), torch_names=("NVIDIA H20",), nvml_names=("NVIDIA H20",)),
    Sku("B200", ("b200",), _gemm(2250.0, 1100.0), 8000.0, 180, (5, 16), "NVIDIA DGX B200 datasheet (per GPU)",
        nvlink=(5, 18), torch_names=("NVIDIA B200",), nvml_names=("NVIDIA B200",)),
    Sku("GB200 NVL72 GPU", ("gb200",), _gemm(2500.0, 1250.0), 8000.0, 186, (5, 16),
        "NVIDIA GB200 NVL72 datasheet (per GPU)", nvlink=(5, 18), torch_names=("NVIDIA GB200",),
        nvml_names=("NVIDIA GB200",)),
    Sku("L40S", ("l40s",), _gemm(362.05, 183.0), 864.0, 48, (4, 16), "NVIDIA L40S datasheet",
        torch_names=("NVIDIA L40S",), nvml_names=("NVIDIA L40S",)),
    Sku("L4", ("l4",), _gemm(121.0, 60.0), 300.0, 24, (4, 16), "NVIDIA L4 datasheet",
        torch_names=("NVIDIA L4",), nvml_names=("NVIDIA L4",)),
    Sku("A10", ("a10",), _gemm(125.0, 62.5), 600.0, 24, (4, 16), "NVIDIA A10 datasheet",
        torch_names=("NVIDIA A10",), nvml_names=("NVIDIA A10",)),
    Sku("A100 SXM4 80GB", ("a100", "sxm4", "80gb"), _gemm(312.0, 156.0), 2039.0, 80, (4, 16),
        "NVIDIA A100 datasheet (SXM4 80GB)", nvlink=(3, 12),
        torch_names=("NVIDIA A100-SXM4-80GB",), nvml_names=("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB")),
    Sku("A100 SXM4 40GB", ("a100", "sxm4", "40gb"), _gemm(312.0, 156.0), 1555.0, 40, (4, 16),
        "NVIDIA A100 datasheet (SXM4 40GB)", nvlink=(3, 12),
        torch_names=("NVIDIA A100-SXM4-40GB",), nvml_names=("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB")),
    Sku("A100 PCIe 80GB", ("a100", "pcie", "80gb"), _gemm(312.0, 156.0), 1935.0, 80, (4, 16),
        "NVIDIA A100 datasheet (PCIe 80GB)", torch_names=("NVIDIA A100 80GB PCIe",),
        nvml_names=("NVIDIA A100 80GB PCIe",)),
    Sku("A100 PCIe 40GB", ("a100", "pcie", "40gb"), _gemm(312.0, 156.0), 1555.0, 40, (4, 16),
        "NVIDIA A100 datasheet (PCIe 40GB)", torch_names=("NVIDIA A100-PCIE-40GB",),
        nvml_names=("NVIDIA A100-PCIE-40GB",)),
    # ROCm: torch names the device as amd-smi's market name; NVML does not exist there.
    Sku("MI300X", ("mi300x",), _gemm(1307.4, 653.7), 5300.0, 192, (5, 16), "AMD Instinct MI300X datasheet",
        torch_names=("AMD Instinct MI300X",)),
    Sku("MI325X", ("mi325x",), _gemm(1307.4, 653.7), 6000.0, 256, (5, 16), "AMD Instinct MI325X datasheet",
        torch_names=("AMD Instinct MI325X",)),
)

# A healthy device's share of the peak: below FRACTION x peak is a finding. Measured on a healthy
# H100 80GB HBM3 (issue 26's anchors): an 8192^3 bf16 product at ~798 of 989 TFLOP/s (0.81), a
# device copy at ~3.0 of 3.35 TB/s (0.90). The thresholds leave ~25% below those for clocks,
# cooling and cuBLAS versions: a finding means a device well under what its kind does.
FRACTION = {"gemm": 0.6, "copy": 0.7, "link": 0.5}

# PCIe payload rate per lane and direction, GB/s, by generation (after line encoding):
# Gen3 8 GT/s 128b/130b, Gen4 16, Gen5 32, Gen6 64 GT/s (PAM4, FLIT).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# NVLink per link and direction, GB/s, by generation (NVML's version enum is mapped to it in
# steps/gather/gpus.py): 1 P100, 2 V100, 3 A100, 4 H100, 5 B200.
NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}

_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(name: str) -> set[str]:
    """The whole tokens of a device name: lower case, split on anything not a letter or digit."""
    return set(_TOKEN.findall(name.lower()))


class Match(Struct, frozen=True):
    """Which row a name matched, and why (or why none)."""

    sku: Sku | None
    why: str


def match(name: str) -> Match:
    """The row `name` (torch's or NVML's) matches by whole tokens, and the reason; no row for a MIG slice."""
    have = tokens(name)
    if not have:
        return Match(None, "no device name")
    if "mig" in have:
        return Match(None, f"{name!r} is a MIG slice: its peaks are a share of the whole GPU's that the table "
                           "does not know, so it is judged against none (only against its siblings)")
    fits = [s for s in SKUS if set(s.needs) <= have and not set(s.refuses) & have]
    if not fits:
        return Match(None, f"no row's tokens are all in {sorted(have)}: an unknown GPU is judged against no peak")
    best = max(fits, key=lambda s: len(s.needs))
    rivals = [s.label for s in fits if s is not best]
    also = f" (more specific than {', '.join(rivals)})" if rivals else ""
    refused = f", and none of {list(best.refuses)}" if best.refuses else ""
    return Match(best, f"tokens {list(best.needs)} all in {sorted(have)}{refused}{also}")


def find(name: str) -> Sku | None:
    """The SKU row of a device name, None when unknown (or a MIG slice)."""
    return match(name).sku


def peak(figure: str, name: str, link_gen: int | None = None,
         link_width: int | None = None) -> tuple[float, str] | None:
    """(peak, source) of one figure on a device named `name`, or None when nothing is known."""
    if figure in LINK_FIGURES:
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


def nvlink_line_gbps(sku: Sku) -> float | None:
    """The board's NVLink rate per direction (links x per-link rate), None without NVLink."""
    if sku.nvlink is None or sku.nvlink[0] not in NVLINK_GBPS_PER_LINK:
        return None
    return sku.nvlink[1] * NVLINK_GBPS_PER_LINK[sku.nvlink[0]]
