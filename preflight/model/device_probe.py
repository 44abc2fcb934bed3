"""The device probes' data: what one rank measured on its own device, and rank 0's judged rows.

`DeviceReport` is the message a rank sends rank 0 (probes/device/store.py, through the model's
codec); `DeviceRow` is one device in the JobReport, each figure beside its siblings' median and
its SKU's peak. Figures are in TFLOP/s (matrix products) and GB/s (copies, bytes read + written).
"""

from __future__ import annotations

from msgspec import Struct, field

# Figure names, as --expect, the report and the checks name them.
GEMM_FIGURES = ("gemm_bf16", "gemm_fp16", "gemm_tf32", "gemm_fp32")
MEMORY_FIGURES = ("copy",)
LINK_FIGURES = ("h2d", "d2h")
UNITS = {**{name: "TFLOP/s" for name in GEMM_FIGURES}, "copy": "GB/s", "h2d": "GB/s", "d2h": "GB/s"}


# Below this share of the siblings' median, in both passes, a device is slow (probes/device_judge.py);
# the HTML's device grids colour a cell red at the same threshold. A GPU's products vary by a few
# percent between healthy devices of a model (clock bins, temperature): 0.85 names one that holds
# a synchronous job back by 15% or more. On CPU the ranks of a host share cores with each other
# and everything else on it, so only a device at half its siblings' speed counts.
SLOW_RATIO = {"cuda": 0.85, "cpu": 0.5}


class Measured(Struct):
    """One figure of one device: the value of each timed burst, in two passes (confirm before blame)."""

    name: str  # one of UNITS
    bursts: list[float] = field(default_factory=list)  # first pass, one value per burst of back-to-back calls
    confirm: list[float] = field(default_factory=list)  # second pass, measured after every other figure
    size: int = 0  # matrix side (gemm) or bytes per call (copies)
    iters: int = 0  # calls per burst

    @property
    def value(self) -> float:
        """The figure: the best burst of both passes (0.0 when nothing was measured).

        The best, not the mean: noise (a preempted thread, another process) only ever slows a
        burst down, so the best burst is the closest to what the device can do, and a device
        that is really slow is slow in every burst.
        """
        return max(self.bursts + self.confirm, default=0.0)


class NvmlSample(Struct):
    """NVML read of the bound GPU while its bursts run (None: NVML could not say)."""

    t_s: float  # seconds since the family started
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    clock_event_reasons: int | None = None  # nvmlClocksEventReason bitmask
    temperature_c: int | None = None
    power_w: float | None = None


class HostLink(Struct):
    """The GPU's PCIe link as NVML reads it during the host copies."""

    gen: int | None = None
    width: int | None = None
    max_gen: int | None = None
    max_width: int | None = None


class DeviceReport(Struct):
    """What one rank measured on its own bound device (its message to rank 0)."""

    rank: int
    host: str
    kind: str  # "cuda" | "cpu"
    name: str = ""  # the GPU model torch names, or the CPU model
    index: int | None = None  # CUDA ordinal in that rank's process
    uuid: str = ""
    serial: str = ""
    pci_bus_id: str = ""
    software: str = ""  # torch version (+ CUDA): results are compared only between equal software
    measured: list[Measured] = field(default_factory=list)
    # Correctness: digests of one deterministic product, computed twice on this device.
    sdc_digest: str = ""
    sdc_repeat_digest: str = ""
    sdc_checksum: list[float] = field(default_factory=list)  # a few sums of the product, for the tolerance test
    sdc_method: str = ""  # what was computed ("fp32 matmul chain 256x256, seed 1234")
    # What must be equal for equal bits: BLAS library and version, compute capability, SM count.
    sdc_key: str = ""
    link: HostLink | None = None
    samples: list[NvmlSample] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # figure -> why it was not measured (no device for it)
    sized: str = ""  # why the operands are smaller than the kind's full size (free memory), "" at full size
    shared_with: int | None = None  # another rank bound to the same GPU (one UUID) measured it for both
    pcie_switch: str = ""  # the PCIe link the GPU shares on its way to the CPU ("" unknown; lib/pci_topology.uplink)
    numa_node: int | None = None  # the GPU's NUMA node, where its pinned buffers were made
    machine: str = ""  # the kernel's boot id (lib/host_turns.machine_id): one machine's CPU ranks share its memory
    errors: dict[str, str] = field(default_factory=dict)  # figure -> why it failed (could not run)
    elapsed_s: float = 0.0

    def figure(self, name: str) -> Measured | None:
        """The named figure, when it was measured."""
        return next((m for m in self.measured if m.name == name), None)


class DeviceFigure(Struct):
    """One judged figure of one device: beside its siblings' median and its SKU's (or --expect's) figure."""

    name: str
    unit: str
    value: float
    siblings_median: float | None = None  # the same figure's median over devices of the same model
    pct_of_siblings: float | None = None
    peak: float | None = None  # the SKU's peak, or --expect's figure
    peak_source: str = ""  # "H100 SXM5 datasheet", "--expect", "" (none)
    pct_of_peak: float | None = None
    bursts: list[float] = field(default_factory=list)  # every timed burst, first pass then second


class DeviceRow(Struct):
    """One device in the JobReport: who it is, every figure judged, correctness and link."""

    rank: int
    host: str
    kind: str
    name: str = ""
    index: int | None = None
    uuid: str = ""
    serial: str = ""
    figures: list[DeviceFigure] = field(default_factory=list)
    sdc: str = ""  # "agrees" | "differs" | "unrepeatable" | "alone" (nothing to compare with) | "" (not run)
    link: HostLink | None = None
    samples: list[NvmlSample] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    skipped: dict[str, str] = field(default_factory=dict)  # figure -> why it was not measured (never a failure)
    sized: str = ""  # why the operands were shrunk (free memory), "" at full size
    shared_with: int | None = None  # the rank that measured this GPU for both (one UUID, two ranks)

    def figure(self, name: str) -> DeviceFigure | None:
        """The named judged figure, when it was measured."""
        return next((f for f in self.figures if f.name == name), None)


# ---- what rank 0 concluded (probes/device/judge.py), for the checks (checks/device_probe.py) ----

class Slow(Struct):
    """One device slow at one figure, against its siblings, in both passes."""

    row: DeviceRow
    figure: str
    unit: str
    value: float
    siblings_median: float
    passes: list[float]  # this device's best burst in each pass
    siblings_passes: list[float]  # the median of the siblings' best bursts in each pass
    siblings: int
    ratio: float


class Differs(Struct):
    """Devices whose correctness digest differs from the reference of their model."""

    rows: list[DeviceRow]
    model: str
    reference_ranks: list[int]
    method: str
    max_rel_diff: dict[int, float] = field(default_factory=dict)  # rank -> largest relative checksum gap
    tie: bool = False  # no majority: the groups are as large as each other


class BelowPeak(Struct):
    """One figure below FRACTION of its SKU's peak (or below --expect)."""

    row: DeviceRow
    figure: DeviceFigure
    fraction: float
    expected: bool  # True: --expect's figure, False: the SKU table's


class Throttled(Struct):
    """A GPU that slowed itself under load while its siblings did not."""

    row: DeviceRow
    reasons: list[str]
    clock_mhz: float | None
    siblings_clock_mhz: float | None
