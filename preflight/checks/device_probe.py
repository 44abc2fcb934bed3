"""The devices themselves: matrix throughput, memory copy, host link, correctness and clocks under load.

Engine-scope checks: the device probes (preflight/probes/device/family.py) measure on every
rank's own device and rank 0 judges (device_judge.py); these turn what it found into findings.
Every finding names the device: rank, host, GPU index, UUID and serial where NVML has them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from msgspec import Struct

from preflight.lib.hostlist import host_text, rank_list
from preflight.lib.numbers import json_number
from preflight.lib.units import percent
from preflight.model import Finding, Severity
from preflight.model.device_probe import BelowPeak, DeviceRow, Differs, Slow, Throttled
from preflight.registry import Problem, Tags, engine_check


def device_name(row: DeviceRow) -> str:
    """'rank 3 on node7 GPU 3 (NVIDIA H100 80GB HBM3, GPU-..., serial 1654...)', or '... CPU (model)'."""
    where = f"rank {row.rank} on {host_text(row.host)}"
    if row.kind != "cuda":
        return f"{where} CPU ({row.name})" if row.name else f"{where} CPU"
    ids = ", ".join(x for x in (row.name, row.uuid, f"serial {row.serial}" if row.serial else "") if x)
    return f"{where} GPU {row.index if row.index is not None else '?'}" + (f" ({ids})" if ids else "")


def _identity(row: DeviceRow) -> dict[str, object]:
    return {"rank": row.rank, "host": row.host, "kind": row.kind, "name": row.name, "index": row.index,
            "uuid": row.uuid, "serial": row.serial}


def _slow_problem(slow: Slow) -> Problem:
    passes = ", ".join(f"{m:.3g} vs {t:.3g}" for m, t in zip(slow.passes, slow.siblings_passes))
    return Problem(
        f"{device_name(slow.row)}: {slow.figure} {slow.value:.3g} {slow.unit} is "
        f"{percent(slow.value / slow.siblings_median)} of its {slow.siblings} siblings' median "
        f"{slow.siblings_median:.3g} "
        f"(threshold {percent(slow.ratio)}; below it in both passes: {passes})",
        ranks=[slow.row.rank], hosts=[slow.row.host] if slow.row.host else [],
        data={**_identity(slow.row), "figure": slow.figure, "unit": slow.unit, "value": slow.value,
              "siblings_median": slow.siblings_median, "passes": slow.passes,
              "siblings_passes": slow.siblings_passes, "ratio": slow.ratio})


SLOW_EXPLAIN = """
    All devices of one model in the job run the same measurement at the same time; a device
    is slow when its best burst is below the threshold share of the median of its siblings'
    best bursts in BOTH passes (each figure is measured twice, the second time after every
    other figure): 0.85 on a GPU, 0.5 on CPU (timed by the thread's CPU time there, since the
    ranks of a host share its cores). At least two siblings are needed. The figure's % of its
    siblings' median and of its SKU's peak are in the device table of every report.
"""


@engine_check(
    "DEV001",
    tag=Tags.GPU_PROBE,
    severity=Severity.ERROR,
    hint="Silent data corruption: drain the named GPU's host and run the vendor's diagnostics "
    "(dcgmi diag -r 3 or 4, field diagnostics) before any training on it; give NVIDIA its serial.",
    blames_host=True,
)
def result_differs(differs: Differs) -> Iterable[Problem]:
    """Correctness: a device's matrix product differs from its siblings' (silent data corruption).

    Every rank multiplies the same deterministic matrices (an fp32 product from a seeded
    generator, tf32 off) on its own device, twice, and sends a digest of the result's bytes
    to rank 0. Devices of one model running the same torch/CUDA compute the same bytes; the
    largest group of equal digests is the reference and every other device is named, with
    the largest relative gap of its row-block sums against the reference.

    What it catches: a device whose arithmetic or memory corrupts this product now (a bad
    SM, a stuck bit in HBM or a cache on the path, a miscompiled or wrong kernel). What it
    cannot catch: corruption that only shows with other data, other kernels or other
    precisions, under heat or load it did not reach, or intermittently (a few seconds of one
    product is a sample, not a burn-in); and a device alone of its model in the job has
    nothing to be compared with (its two runs are still compared, DEV002). With two groups
    of equal size nobody can tell which is right: both are named.
    """
    d = differs
    who = "; ".join(device_name(r) + (f" (checksum gap {d.max_rel_diff[r.rank]:.2g})"
                                      if not math.isnan(d.max_rel_diff.get(r.rank, math.nan)) else "")
                    for r in d.rows)
    ref = rank_list(d.reference_ranks)
    lead = (f"{d.model}: results split evenly, cannot tell which is right: " if d.tie
            else f"{d.model}: result differs from its siblings' (ranks {ref} agree): ")
    yield Problem(lead + who + f" [{d.method}]", ranks=[r.rank for r in d.rows],
                  hosts=sorted({r.host for r in d.rows if r.host}),
                  data={"devices": [_identity(r) for r in d.rows], "reference_ranks": d.reference_ranks,
                        "method": d.method, "tie": d.tie,
                        "max_rel_diff": {str(k): v for k, v in d.max_rel_diff.items() if not math.isnan(v)}})


@engine_check(
    "DEV002",
    tag=Tags.GPU_PROBE,
    severity=Severity.ERROR,
    hint="A device that gives two answers to one product is corrupting data: drain its host and run "
    "the vendor's diagnostics before training on it.",
    blames_host=True,
)
def result_unrepeatable(row: DeviceRow) -> Iterable[Problem]:
    """Correctness: a device computed the same deterministic product twice and got different bytes.

    Needs no sibling: the same inputs, kernel and device must give the same bytes twice.
    Catches corruption that comes and goes within a second; not one that repeats itself
    identically (DEV001 compares devices for that).
    """
    yield Problem(f"{device_name(row)}: the same deterministic product gave different results twice",
                  ranks=[row.rank], hosts=[row.host] if row.host else [], data=_identity(row))


@engine_check(
    "DEV003",
    tag=Tags.GPU_PROBE,
    severity=Severity.WARN,
    hint="Look at the device's clocks, temperature, power limit and other processes (nvidia-smi -q -d "
    "PERFORMANCE,CLOCK,POWER); a device that holds a synchronous job back sets every rank's pace.",
)
def matrix_slow(slow: Slow) -> Iterable[Problem]:
    """Matrix throughput (TFLOP/s) of a device is well below its siblings'.

    Back-to-back matrix products through torch.matmul (bf16, fp16 and tf32 8192^3 on a GPU,
    a 192^3 fp32 product on CPU), timed with one synchronisation per burst (CUDA events on a
    GPU).
    """
    yield _slow_problem(slow)


matrix_slow.spec.func.__doc__ = (matrix_slow.spec.func.__doc__ or "") + SLOW_EXPLAIN


@engine_check(
    "DEV004",
    tag=Tags.GPU_PROBE,
    severity=Severity.WARN,
    hint="Degraded memory bandwidth: check the device's memory clock and ECC/row-remapping state "
    "(nvidia-smi -q -d MEMORY,ECC,ROW_REMAPPER) and run dcgmi diag -r 3.",
)
def copy_slow(slow: Slow) -> Iterable[Problem]:
    """Memory copy bandwidth (GB/s, bytes read + written) of a device is well below its siblings'.

    A device-to-device copy (512 MiB on a GPU, 4 MiB on CPU), counted as bandwidth tools
    count it: every byte is read once and written once.
    """
    yield _slow_problem(slow)


copy_slow.spec.func.__doc__ = (copy_slow.spec.func.__doc__ or "") + SLOW_EXPLAIN


@engine_check(
    "DEV005",
    tag=Tags.GPU_PROBE,
    severity=Severity.WARN,
    hint="Check the slot's PCIe link (nvidia-smi -q -d PCI, lspci -vv: LnkSta against LnkCap), "
    "the riser or retimer, and the NUMA placement of the rank.",
)
def host_link_slow(slow: Slow) -> Iterable[Problem]:
    """Host link bandwidth (GB/s, pinned host<->device copies) of a GPU is well below its siblings'.

    256 MiB copies between pinned host memory and the GPU, each direction apart (h2d, d2h).
    """
    yield _slow_problem(slow)


host_link_slow.spec.func.__doc__ = (host_link_slow.spec.func.__doc__ or "") + SLOW_EXPLAIN


def _below_problem(b: BelowPeak) -> Problem:
    f = b.figure
    what = "--expect" if b.expected else f"{percent(b.fraction)} of its peak {f.peak:.4g} {f.unit} ({f.peak_source})"
    target = f"{f.peak:.4g} {f.unit} (--expect)" if b.expected else what
    return Problem(f"{device_name(b.row)}: {f.name} {f.value:.4g} {f.unit} is {percent(f.pct_of_peak)} of "
                   f"{'the expected ' if b.expected else 'the peak, below '}{target}",
                   ranks=[b.row.rank], hosts=[b.row.host] if b.row.host else [],
                   data={**_identity(b.row), "figure": f.name, "unit": f.unit, "value": f.value, "peak": f.peak,
                         "peak_source": f.peak_source, "pct_of_peak": f.pct_of_peak, "fraction": b.fraction})


@engine_check(
    "DEV006",
    tag=Tags.GPU_PROBE,
    severity=Severity.WARN,
    hint="Every device of this model may be slow alike (a power cap, a clock policy, a slot "
    "trained down): compare with nvidia-smi -q and the SKU's datasheet, or pass --expect where "
    "you know your devices' figures better.",
)
def below_sku_peak(below: BelowPeak) -> Iterable[Problem]:
    """A device figure is below the justified share of its SKU's published peak (or its PCIe link's rate).

    Matrix TFLOP/s below 0.6 of the dense peak, copy GB/s below 0.7 of the memory bandwidth,
    host copies below 0.5 of the PCIe link NVML reports (generation x width): a Gen5 x16 slot
    that moves Gen3 speeds is named even when NVML says Gen5. A healthy H100 80GB HBM3 runs
    an 8192^3 bf16 product at ~0.81 of its peak and copies at ~0.90. Unknown GPUs and every
    CPU have no peak: nothing is invented (the report says "none"). This catches what the
    sibling comparison cannot: every device of a job equally slow.
    """
    yield _below_problem(below)


@engine_check(
    "DEV007",
    tag=Tags.GPU_PROBE,
    severity=Severity.ERROR,
    hint="The device missed the figure you asked for with --expect; check it as for DEV006, or "
    "correct --expect.",
)
def below_expected(below: BelowPeak) -> Iterable[Problem]:
    """A device figure is below what `--expect` asked for (gemm=700TFLOPS, hbm=2.8TB/s, h2d=50GB/s)."""
    yield _below_problem(below)


@engine_check(
    "DEV008",
    tag=Tags.GPU_PROBE,
    severity=Severity.WARN,
    hint="A GPU that slows itself under load is too hot or power-limited: check its cooling, "
    "fans and power limit (nvidia-smi -q -d TEMPERATURE,POWER,PERFORMANCE).",
)
def throttled_under_load(throttled: Throttled) -> Iterable[Problem]:
    """A GPU slowed itself under load (thermal/power slowdown, or a collapsed SM clock) while its siblings did not.

    NVML is sampled after every burst of matrix products (SM clock, clock event reasons,
    temperature, power), and for `--device-sustain SECONDS` of continuous load when asked.
    A slowdown reason (power cap, hardware slowdown, thermal, power brake) that most of its
    siblings do not show, or a median SM clock below 0.85 of theirs, is named.
    """
    t = throttled
    parts = []
    if t.reasons:
        parts.append(", ".join(t.reasons))
    if t.clock_mhz and t.siblings_clock_mhz:
        parts.append(f"SM clock {t.clock_mhz:.0f} MHz vs siblings' {t.siblings_clock_mhz:.0f} MHz")
    yield Problem(f"{device_name(t.row)} slowed under load: {'; '.join(parts)}", ranks=[t.row.rank],
                  hosts=[t.row.host] if t.row.host else [],
                  data={**_identity(t.row), "reasons": t.reasons, "clock_mhz": t.clock_mhz,
                        "siblings_clock_mhz": t.siblings_clock_mhz})


@engine_check(
    "DEV009",
    tag=Tags.GPU_PROBE,
    severity=Severity.COULD_NOT_RUN,
    hint="A figure that could not be measured is not a pass: read the reason (out of memory, a dtype "
    "the device lacks, a rank that died) and run again.",
)
def device_could_not_run(rank: int, host: str, figure: str, why: str) -> Iterable[Problem]:
    """A device figure could not be measured (the probe raised, or the rank's report never came)."""
    yield Problem(f"rank {rank} on {host_text(host)}: {figure} could not be measured: {why}", ranks=[rank],
                  hosts=[host] if host else [], data={"figure": figure, "reason": why})


class SlowDevice(Struct, frozen=True):
    """DEV003-DEV005 as the spare-node choice reads them: which figure, and its value as a fraction
    of its same-model siblings' median (None when the data has neither)."""

    figure: str
    fraction: float | None


def slow_device(finding: Finding) -> SlowDevice:
    """The figure and fraction of a slow-device finding (matrix_slow, copy_slow, host_link_slow), from its
    data as `_slow_problem` writes it: the one reader of those keys."""
    value, median = json_number(finding.data.get("value")), json_number(finding.data.get("siblings_median"))
    return SlowDevice(figure=str(finding.data.get("figure", "?"))[:64],
                      fraction=value / median if value is not None and median else None)
