"""The device family on the FAKE GPU boundary (tests/helpers/fake_device.py), judged on rank 0's rules.

GPU paths no CI machine has: bf16/fp16/tf32 products against the H100's table, pinned host
copies against the PCIe link NVML reports, NVML samples under load, a figure that fails, and
the correctness digests, through the same run_family and judge the real devices go through.
"""

from __future__ import annotations

import pytest

from preflight.model.device_probe import DeviceReport, HostLink, NvmlSample
from preflight.probes.device import judge as device_judge
from preflight.probes.device.family import rate, run_family
from preflight.probes.device.run import findings, outcomes
from tests.helpers.fake_device import HEALTHY_H100, FakeDevice, measure


def judged(devices: dict[int, FakeDevice], expect: dict[str, float] | None = None) -> device_judge.Judged:
    reports = {rank: measure(rank, device) for rank, device in devices.items()}
    return device_judge.judge(reports, {}, {r: rep.host for r, rep in reports.items()}, expect)


def ids(judgement: device_judge.Judged) -> list[tuple[str, list[int]]]:
    return sorted((f.check_id, f.ranks) for f in findings(judgement))


def test_fake_h100_figures_are_timed_from_its_rates_and_judged_against_the_table() -> None:
    report = measure(0, FakeDevice())
    assert {m.name: round(m.value, 1) for m in report.measured} == HEALTHY_H100
    assert all(len(m.bursts) == 5 and len(m.confirm) == 5 and m.iters > 1 for m in report.measured)
    assert report.serial == "1654922000001" and report.link == HostLink(5, 16, 5, 16)
    assert report.sdc_digest == report.sdc_repeat_digest and report.sdc_method.startswith("fp32 matmul 2048")
    row = judged({0: FakeDevice()}).rows[0]
    bf16 = row.figure("gemm_bf16")
    assert bf16.peak == 989.0 and bf16.peak_source == "NVIDIA H100 datasheet (SXM5)"
    assert bf16.pct_of_peak == pytest.approx(798 / 989, rel=1e-3)
    assert row.figure("copy").pct_of_peak == pytest.approx(3000 / 3350, rel=1e-3)
    assert row.figure("h2d").peak == pytest.approx(3.938 * 16) and "Gen5 x16" in row.figure("h2d").peak_source


def test_healthy_gpus_raise_nothing() -> None:
    judgement = judged({r: FakeDevice() for r in range(8)})
    assert ids(judgement) == []
    assert all(row.sdc == "agrees" for row in judgement.rows)
    assert all(o.status.value == "ok" for o in outcomes(findings(judgement)))


def test_gen5_slot_moving_gen3_speeds_is_named_against_its_link_and_its_siblings() -> None:
    devices = {r: FakeDevice() for r in range(4)}
    devices[2] = FakeDevice(rates={**HEALTHY_H100, "h2d": 12.5, "d2h": 12.8})  # NVML still says Gen5 x16
    found = findings(judged(devices))
    assert sorted((f.check_id, f.data["figure"]) for f in found) == [
        ("DEV005", "d2h"), ("DEV005", "h2d"), ("DEV006", "d2h"), ("DEV006", "h2d")]
    assert all(f.ranks == [2] for f in found)
    below = next(f for f in found if f.check_id == "DEV006")
    assert "PCIe Gen5 x16" in below.message and "GPU-0002" in below.message and "1654922000001" in below.message


def test_slow_gpu_is_named_in_both_passes_only() -> None:
    devices = {r: FakeDevice() for r in range(4)}
    devices[1] = FakeDevice(rates={**HEALTHY_H100, "gemm_bf16": 500.0})
    # slow in the first pass only (a moment of noise): never named
    devices[3] = FakeDevice(burst_rates={"gemm_fp16": [400.0] * 5 + [790.0] * 5})
    found = findings(judged(devices))
    assert [(f.check_id, f.ranks, f.data["figure"]) for f in found if f.check_id == "DEV003"] == [
        ("DEV003", [1], "gemm_bf16")]
    slow = next(f for f in found if f.check_id == "DEV003")
    assert slow.data["passes"] == pytest.approx([500.0, 500.0]) and "63% of its 3 siblings' median" in slow.message


def test_one_sibling_is_not_enough_to_blame_either() -> None:
    devices = {0: FakeDevice(), 1: FakeDevice(rates={**HEALTHY_H100, "copy": 1000.0})}
    found = findings(judged(devices))
    assert [f.check_id for f in found] == ["DEV006"]  # 1000 of 3350 GB/s: the table still speaks


def test_differing_result_is_an_error_naming_the_gpu_and_its_serial() -> None:
    devices = {r: FakeDevice() for r in range(4)}
    devices[3] = FakeDevice(digests=["e" * 32], checksum=[1.0] * 7 + [1.5], serial_number="SN-BAD")
    found = findings(judged(devices))
    assert [(f.check_id, f.ranks, f.severity.value) for f in found] == [("DEV001", [3], "error")]
    assert "GPU 3" in found[0].message and "GPU-0003" in found[0].message and "serial SN-BAD" in found[0].message
    assert found[0].data["reference_ranks"] == [0, 1, 2] and found[0].data["max_rel_diff"] == {"3": 0.5}
    assert found[0].blames_host


def test_even_split_names_every_device_and_says_it_cannot_tell() -> None:
    devices = {0: FakeDevice(), 1: FakeDevice(), 2: FakeDevice(digests=["e" * 32]), 3: FakeDevice(digests=["e" * 32])}
    found = findings(judged(devices))
    assert [(f.check_id, f.ranks) for f in found] == [("DEV001", [0, 1, 2, 3])]
    assert "cannot tell" in found[0].message and found[0].data["tie"] is True


def test_result_that_changes_between_two_runs_is_an_error_without_siblings() -> None:
    judgement = judged({0: FakeDevice(digests=["a" * 32, "b" * 32])})
    assert ids(judgement) == [("DEV002", [0])]
    assert judgement.rows[0].sdc == "unrepeatable"


def test_device_alone_of_its_model_has_nothing_to_compare() -> None:
    judgement = judged({0: FakeDevice(), 1: FakeDevice(name="NVIDIA B300 something")})
    assert [row.sdc for row in judgement.rows] == ["alone", "alone"]
    # An unknown model has no peak: nothing is invented.
    assert all(f.peak is None for f in judgement.rows[1].figures if f.name not in ("h2d", "d2h"))


def test_gpu_that_throttles_under_load_while_its_siblings_do_not_is_named() -> None:
    cool = [NvmlSample(0.1, 1980, 1980, 0, 60, 690.0)]
    devices = {r: FakeDevice(samples=cool) for r in range(4)}
    devices[0] = FakeDevice(samples=[NvmlSample(0.1, 1980, 1980, 0, 70, 700.0),
                                     NvmlSample(0.5, 1100, 1980, 0x40, 91, 500.0)])
    judgement = judged(devices)
    assert ids(judgement) == [("DEV008", [0])]
    assert judgement.throttled[0].reasons == ["hardware thermal slowdown"]
    # Every sibling capped alike: a shared reason is not this GPU's fault.
    capped = [NvmlSample(0.1, 1980, 1980, 0x4, 60, 700.0)]
    assert ids(judged({r: FakeDevice(samples=capped) for r in range(4)})) == []


def test_figure_that_fails_could_not_run_and_the_rest_are_measured() -> None:
    judgement = judged({0: FakeDevice(failing={"gemm_fp16": "CUBLAS_STATUS_NOT_SUPPORTED"})})
    assert ids(judgement) == [("DEV009", [0])]
    assert {f.name for f in judgement.rows[0].figures} == {"gemm_bf16", "gemm_tf32", "copy", "h2d", "d2h"}


def test_expect_overrides_the_table() -> None:
    judgement = judged({0: FakeDevice()}, expect={"gemm": 900.0, "copy": 2800.0})
    assert ids(judgement) == [("DEV007", [0])]
    row = judgement.rows[0]
    assert row.figure("gemm_bf16").peak_source == "--expect" and row.figure("copy").peak == 2800.0


def test_rank_whose_report_never_came_could_not_run() -> None:
    judgement = device_judge.judge({0: measure(0, FakeDevice())}, {1: "sent no device report in time"},
                                   {1: "node9"})
    assert [(f.check_id, f.ranks, f.hosts) for f in findings(judgement)] == [("DEV009", [1], ["node9"])]


def test_rates_count_flops_and_bytes_as_the_tools_do() -> None:
    assert rate("gemm_bf16", 8192, 10, 0.0138) == pytest.approx(2 * 8192**3 * 10 / 0.0138 / 1e12)
    assert rate("copy", 2**30, 1, 1.0) == pytest.approx(2 * 2**30 / 1e9)  # read + written
    assert rate("h2d", 2**30, 1, 1.0) == pytest.approx(2**30 / 1e9)  # crosses the link once


def test_sustained_load_is_sampled_at_a_bounded_rate() -> None:
    device = FakeDevice(samples=[NvmlSample(0.1, 1980, 1980, 0, 60, 690.0)])
    report = DeviceReport(0, "node0", "cuda", name=device.name)
    run_family(device, report, budget_s=1.0, sustain_s=0.6)
    during_bursts = 3 * 2 * 5  # bf16, fp16, tf32: a sample after each burst of both passes
    assert during_bursts < len(report.samples) <= during_bursts + 4  # every 0.25 s of the 0.6 s


def test_the_sustained_load_is_sampled_while_the_gpu_works_never_between_bursts() -> None:
    """NVML read after a burst's synchronize reads an idle GPU: its clocks, power and throttle reasons."""
    device = FakeDevice(samples=[NvmlSample(0.1, 1980, 1980, 0, 60, 690.0)])
    report = DeviceReport(0, "node0", "cuda", name=device.name)
    run_family(device, report, budget_s=1.0, sustain_s=0.6)
    assert len(report.samples) > 3 * 2 * 5  # the sustained load's samples are there
    assert device.idle_samples == 0  # and every one of them was read during a burst


def _cpu(rank: int, machine: str, copy: float, gemm: float = 0.06) -> DeviceReport:
    """A CPU rank's report: both passes' bursts at these rates."""
    from preflight.model.device_probe import Measured

    report = DeviceReport(rank, f"host{rank}", "cpu", name="AMD EPYC", machine=machine)
    report.measured = [Measured("gemm_fp32", bursts=[gemm] * 5, confirm=[gemm] * 5, size=192),
                       Measured("copy", bursts=[copy] * 5, confirm=[copy] * 5, size=4 * 2**20)]
    return report


def test_cpu_copies_are_compared_across_machines_only_and_cpu_products_on_one_machine_too() -> None:
    # Four ranks of one machine (one boot id; their hostnames may differ: containers, netns hosts): one
    # memory system, so rank 3's copy at 30% is the moment it was read at, not its device. Its product at a
    # third is its own cores' (the ranks run on their own), and is named.
    one = {r: _cpu(r, "boot-a", copy=24.0 if r == 3 else 80.0, gemm=0.02 if r == 3 else 0.06) for r in range(4)}
    judgement = device_judge.judge(one, {}, {r: f"host{r}" for r in one})
    assert [(s.row.rank, s.figure) for s in judgement.slow] == [(3, "gemm_fp32")]
    copy = next(f for f in judgement.rows[3].figures if f.name == "copy")
    assert copy.siblings_median is None and copy.pct_of_siblings is None  # nobody to compare it with
    # Four machines: four memory systems, and the slow one is named.
    apart = {r: _cpu(r, f"boot-{r}", copy=24.0 if r == 3 else 80.0) for r in range(4)}
    judgement = device_judge.judge(apart, {}, {r: f"host{r}" for r in apart})
    assert [(s.row.rank, s.figure) for s in judgement.slow] == [(3, "copy")]
    # Without a boot id (an older rank's report) the hostname stands for the machine.
    legacy = {r: _cpu(r, "", copy=24.0 if r == 3 else 80.0) for r in range(4)}
    assert [(s.row.rank, s.figure) for s in device_judge.judge(legacy, {}, {}).slow] == [(3, "copy")]
