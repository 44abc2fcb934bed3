"""Rank 0: judge every device's figures against its siblings and its SKU, and compare the results.

Siblings are the devices of the same model in this job (same kind and name); for a CPU's copy figure,
only the CPUs of other machines (one_memory). A device is slow
at a figure when, in BOTH passes (family.PASSES), its best burst is below SLOW_RATIO
of the median of its siblings' best bursts: a burst of noise in one pass is not a slow device (confirm before
blame, as the collective straggler rule does). At least MIN_SIBLINGS other devices are needed:
with one sibling nobody can tell which of the two is slow.

Correctness: devices of one model running the same software must produce the same bytes for
the same deterministic product; the largest group of equal digests is the reference and every
other device is named. A device whose own two runs differ is named whatever its siblings say.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from msgspec import Struct, field

from preflight.model.device_probe import (
    LINK_FIGURES,
    SLOW_RATIO,
    UNITS,
    BelowPeak,
    DeviceFigure,
    DeviceReport,
    DeviceRow,
    Differs,
    NvmlSample,
    Slow,
    Throttled,
)
from preflight.probes.device import hardware

MIN_SIBLINGS = 2
# NVML clock event reasons that mean the GPU slowed itself: SW power cap, HW slowdown, SW/HW
# thermal, power brake (nvmlClocksEventReason*: 0x4, 0x8, 0x20, 0x40, 0x80).
SLOWDOWN_BITS = {0x4: "power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
                 0x40: "hardware thermal slowdown", 0x80: "power brake"}
CLOCK_RATIO = 0.85  # an SM clock under load below this share of its siblings' median is a collapse


class Judged(Struct):
    """Everything rank 0 concluded from the device reports."""

    rows: list[DeviceRow] = field(default_factory=list)
    slow: list[Slow] = field(default_factory=list)
    differs: list[Differs] = field(default_factory=list)
    unrepeatable: list[DeviceRow] = field(default_factory=list)
    below: list[BelowPeak] = field(default_factory=list)
    throttled: list[Throttled] = field(default_factory=list)
    could_not_run: list[tuple[int, str, str, str]] = field(default_factory=list)  # rank, host, figure, why


def _model(report: DeviceReport) -> tuple[str, str]:
    return (report.kind, report.name)


def _pass_medians(report: DeviceReport, name: str) -> list[float]:
    m = report.figure(name)
    if m is None:
        return []
    return [max(p) for p in (m.bursts, m.confirm) if p]


def judge(reports: Mapping[int, DeviceReport], missing: Mapping[int, str], hosts: Mapping[int, str],
          expect: Mapping[str, float] | None = None) -> Judged:
    """Rows, slow devices, differing results, figures below peak, throttling and what could not run."""
    expect = dict(expect or {})
    out = Judged()
    models: dict[tuple[str, str], list[DeviceReport]] = {}
    for report in reports.values():
        models.setdefault(_model(report), []).append(report)
    rows = {r.rank: DeviceRow(r.rank, r.host, r.kind, r.name, r.index, r.uuid, r.serial, link=r.link,
                              samples=r.samples, errors=dict(r.errors), elapsed_s=r.elapsed_s,
                              skipped=dict(r.skipped), sized=r.sized, shared_with=r.shared_with)
            for r in reports.values()}
    for members in models.values():
        _judge_figures(members, rows, out, expect)
        _judge_sdc(members, rows, out)
        _judge_clocks(members, rows, out)
    out.rows = [rows[rank] for rank in sorted(rows)]
    for rank, row in sorted(rows.items()):
        for figure, why in sorted(row.errors.items()):
            out.could_not_run.append((rank, row.host, figure, why))
    for rank, why in sorted(missing.items()):
        out.could_not_run.append((rank, hosts.get(rank, ""), "every figure", why))
    return out


def _expected(name: str, kind: str, expect: Mapping[str, float]) -> float | None:
    if name in expect:
        return expect[name]
    headline = "gemm_bf16" if kind == "cuda" else "gemm_fp32"
    if name == headline and "gemm" in expect:
        return expect["gemm"]
    return expect.get("hbm") if name == "copy" else None


def _judge_figures(members: list[DeviceReport], rows: dict[int, DeviceRow], out: Judged,
                   expect: Mapping[str, float]) -> None:
    names = sorted({m.name for r in members for m in r.measured}, key=list(UNITS).index)
    position = _link_positions(members)
    for name in names:
        have = [r for r in members if r.figure(name) is not None]
        for report in have:
            value = report.figure(name).value  # type: ignore[union-attr]
            measured = report.figure(name)
            # Siblings ran the same size: a product shrunk to fit free memory runs below a full one's rate.
            others = [o for o in have if o.rank != report.rank and o.figure(name).size == measured.size  # type: ignore[union-attr]
                      and (name not in LINK_FIGURES or position[o.rank] == position[report.rank])
                      and not one_memory(report, o, name)]
            figure = DeviceFigure(name, UNITS[name], value, bursts=[*measured.bursts, *measured.confirm])  # type: ignore[union-attr]
            if others:
                figure.siblings_median = statistics.median(o.figure(name).value for o in others)  # type: ignore[union-attr]
                figure.pct_of_siblings = value / figure.siblings_median if figure.siblings_median else None
            expected = _expected(name, report.kind, expect)
            if report.sized:
                pass  # shrunk operands: no peak or --expect (they were meant for full-size operands)
            elif expected is not None:
                figure.peak, figure.peak_source = expected, "--expect"
            else:
                link = report.link
                found = hardware.peak(name, report.name, link.gen if link else None, link.width if link else None)
                if found is not None:
                    figure.peak, figure.peak_source = found
            if figure.peak:
                figure.pct_of_peak = value / figure.peak
            rows[report.rank].figures.append(figure)
            if figure.pct_of_peak is not None:
                share = 1.0 if figure.peak_source == "--expect" else hardware.fraction(name)
                if figure.pct_of_peak < share:
                    out.below.append(BelowPeak(rows[report.rank], figure, share, figure.peak_source == "--expect"))
            slow = _slow(report, others, name)
            if slow is not None:
                out.slow.append(Slow(rows[report.rank], name, UNITS[name], value, figure.siblings_median or 0.0,
                                     *slow, siblings=len(others), ratio=SLOW_RATIO.get(report.kind, 0.5)))


def one_memory(a: DeviceReport, b: DeviceReport, name: str) -> bool:
    """Two CPU ranks of one machine (one boot id; one host where unknown) copying: one memory system read at
    two moments, never two devices to compare. Whatever else ran on the machine at each moment decides the
    gap (healthy 4- and 8-rank runs on 2 cores read one rank's copy at 30-46% of its siblings', in both passes,
    in 2 of 4 suite runs of 20 launches); a GPU's copy is its own HBM's, a CPU product the rank's own cores'."""
    return name == "copy" and a.kind == b.kind == "cpu" and (a.machine or a.host) == (b.machine or b.host)


def _link_positions(members: list[DeviceReport]) -> dict[int, int]:
    """rank -> its GPU's topology position for the host-link figures: how many of its host's GPUs sit
    behind its PCIe switch (0: topology unknown). Host links are compared within one position only:
    a GPU alone on its switch and one sharing it are not the same kind of link."""
    behind: dict[tuple[str, str], set[str]] = {}
    for r in members:
        if r.pcie_switch:
            behind.setdefault((r.host, r.pcie_switch), set()).add(r.uuid or str(r.rank))
    return {r.rank: len(behind.get((r.host, r.pcie_switch), ())) for r in members}


def _slow(report: DeviceReport, others: list[DeviceReport], name: str) -> tuple[list[float], list[float]] | None:
    """(this device's pass medians, the siblings' pass medians) when it is slow in every pass, else None."""
    if len(others) < MIN_SIBLINGS:
        return None
    ratio = SLOW_RATIO.get(report.kind, 0.5)
    mine = _pass_medians(report, name)
    theirs = []
    for index in range(len(mine)):
        values = [p[index] for p in (_pass_medians(o, name) for o in others) if len(p) > index]
        if len(values) < MIN_SIBLINGS:
            return None
        theirs.append(statistics.median(values))
    if len(mine) < 2 or not all(m < ratio * t for m, t in zip(mine, theirs)):
        return None
    return mine, theirs


def _judge_sdc(members: list[DeviceReport], rows: dict[int, DeviceRow], out: Judged) -> None:
    for report in members:
        row = rows[report.rank]
        if not report.sdc_digest:
            continue
        row.sdc = "agrees"
        if report.sdc_repeat_digest and report.sdc_repeat_digest != report.sdc_digest:
            row.sdc = "unrepeatable"
            out.unrepeatable.append(row)
    # Equal bits are promised only within one library build, architecture and SM count, for one product
    # (sdc_key: cuBLAS/hipBLASLt version, compute capability, SMs; sdc_method: the product's size).
    by_software: dict[tuple[str, str, str], list[DeviceReport]] = {}
    for report in members:
        if report.sdc_digest:
            by_software.setdefault((report.software, report.sdc_key, report.sdc_method), []).append(report)
    for group in by_software.values():
        if len(group) < 2:
            for report in group:
                rows[report.rank].sdc = rows[report.rank].sdc if rows[report.rank].sdc != "agrees" else "alone"
            continue
        digests: dict[str, list[DeviceReport]] = {}
        for report in group:
            digests.setdefault(report.sdc_digest, []).append(report)
        if len(digests) == 1:
            continue
        ranked = sorted(digests.values(), key=len, reverse=True)
        tie = len(ranked[0]) == len(ranked[1])
        reference = ranked[0]
        named = [r for d in (ranked if tie else ranked[1:]) for r in d]
        ref_sums = reference[0].sdc_checksum
        gaps = {r.rank: _rel_gap(r.sdc_checksum, ref_sums) for r in named}
        for r in named:
            rows[r.rank].sdc = "differs"
        out.differs.append(Differs([rows[r.rank] for r in sorted(named, key=lambda x: x.rank)],
                                   f"{group[0].kind} {group[0].name}".strip(), sorted(r.rank for r in reference),
                                   group[0].sdc_method, gaps, tie))


def _rel_gap(mine: list[float], ref: list[float]) -> float:
    if not mine or len(mine) != len(ref):
        return float("nan")
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(mine, ref))


def _reasons(samples: list[NvmlSample]) -> set[str]:
    bits = 0
    for s in samples:
        bits |= s.clock_event_reasons or 0
    return {text for bit, text in SLOWDOWN_BITS.items() if bits & bit}


def _clock(samples: list[NvmlSample]) -> float | None:
    clocks = [s.sm_clock_mhz for s in samples if s.sm_clock_mhz]
    return float(statistics.median(clocks)) if clocks else None


def _judge_clocks(members: list[DeviceReport], rows: dict[int, DeviceRow], out: Judged) -> None:
    sampled = [r for r in members if r.samples]
    if len(sampled) < MIN_SIBLINGS + 1:
        return
    for report in sampled:
        others = [o for o in sampled if o.rank != report.rank]
        mine = _reasons(report.samples)
        usual = {reason for reason in mine if sum(reason in _reasons(o.samples) for o in others) * 2 >= len(others)}
        clock = _clock(report.samples)
        clocks = [c for c in (_clock(o.samples) for o in others) if c]
        sib_clock = statistics.median(clocks) if clocks else None
        collapsed = clock is not None and sib_clock is not None and clock < CLOCK_RATIO * sib_clock
        if (mine - usual) or collapsed:
            out.throttled.append(Throttled(rows[report.rank], sorted(mine - usual), clock, sib_clock))
