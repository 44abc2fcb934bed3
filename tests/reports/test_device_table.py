"""The device table (text, terminal) and the HTML's host x GPU grids, from judged fake GPUs."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET

from preflight.model import JobReport, ReportMeta
from preflight.model.device_probe import SLOW_RATIO, DeviceFigure, DeviceRow
from preflight.probes.device import judge as device_judge
from preflight.probes.device.run import findings, outcomes
from preflight.reports import device_table, html, junit, terminal, text
from tests.helpers.fake_device import HEALTHY_H100, FakeDevice, measure


def _report(n: int = 16, slow: int = 11) -> JobReport:
    devices = {r: FakeDevice() for r in range(n)}
    devices[slow] = FakeDevice(rates={**HEALTHY_H100, "gemm_bf16": 400.0})
    reports = {r: measure(r, d) for r, d in devices.items()}
    judged = device_judge.judge(reports, {}, {r: rep.host for r, rep in reports.items()})
    found = findings(judged)
    meta = ReportMeta("srun", "1", "run", n, 2, "node0", 29500)
    return JobReport(meta, findings=found, checks=outcomes(found), device_probes=judged.rows)


def test_text_and_terminal_show_each_figure_beside_siblings_and_peak() -> None:
    report = _report()
    plain = text.render(report)
    assert device_table.TITLE in plain
    line = next(ln for ln in plain.splitlines() if ln.lstrip().startswith("11 ") and "gemm_bf16" in ln)
    assert "400 TFLOP/s" in line and "50%" in line and "40% of 989 (NVIDIA H100 datasheet (SXM5))" in line
    assert "GPU-0011" in line and "GPU 3 NVIDIA H100 80GB HBM3" in line and "Gen5 x16" in line
    out = io.StringIO()
    terminal.render(report, out)
    assert "device probes" in out.getvalue() and "gemm_bf16" in out.getvalue()


def test_text_table_keeps_the_devices_furthest_below_their_siblings() -> None:
    report = _report(n=40, slow=37)
    rows = device_table.device_rows(report)
    shown = [int(r[0]) for r in rows if r[0]]
    assert len(shown) == device_table.MAX_DEVICES and 37 in shown
    assert "... and 8 more device(s)" in text.render(report)


def test_html_grid_per_figure_colours_cells_and_names_the_slow_one() -> None:
    page = html.render(_report())
    assert page.count('class="device-grid"') == 6  # bf16, fp16, tf32, copy, h2d, d2h
    assert "slowest: rank 11 on node1 GPU 3 NVIDIA H100 80GB HBM3: 400 TFLOP/s, 50% of its siblings&#39; median" in page
    red = device_table.cell_colour(0.0, 0.85)
    assert page.count(f'class="device-cell" style="background: {red}"') == 1  # only the slow cell is red


def _cell_colours(page: str) -> dict[int, str]:
    """rank -> its device cell's background, from the HTML as rendered."""
    found = re.findall(r'class="device-cell" style="background: (#[0-9a-f]{6})" title="rank (\d+):', page)
    return {int(rank): colour for colour, rank in found}


def test_html_device_cells_are_red_where_the_cpu_findings_start_with_a_legend() -> None:
    """On CPU a device is slow below 50% of its siblings (model.SLOW_RATIO): 35% is red, 85% is not."""
    rows = [DeviceRow(rank, "node1", "cpu", figures=[DeviceFigure("copy", "GB/s", 10.0 * pct, 10.0, pct)])
            for rank, pct in enumerate([1.0, 1.0, 0.85, 0.35])]
    page = html.render(JobReport(ReportMeta("env", "", "r", 4, 1, "node1", 29500), device_probes=rows))
    colours = _cell_colours(page)
    red = device_table.cell_colour(0.0, SLOW_RATIO["cpu"])
    assert colours[3] == red and colours[2] != red and colours[0] != red, colours
    assert 'class="small legend device-legend"' in page and "below 50%: slow (a device finding)" in page
    # A GPU's threshold is its own finding's: 85% there is not red either, 84% is.
    assert device_table.cell_colour(0.85, SLOW_RATIO["cuda"]) != device_table.cell_colour(0.84, SLOW_RATIO["cuda"])


def test_junit_has_a_testcase_per_device_check() -> None:
    tree = junit.build(_report())
    cases = {c.get("name").split(":")[0]: c for c in tree.getroot().iter("testcase")}
    assert {f"DEV00{i}" for i in range(1, 10)} <= set(cases)
    assert "rank 11 on node1 GPU 3" in cases["DEV003"].find("system-out").text  # a warning
    assert cases["DEV003"].find("failure") is None
    assert b"failure" not in ET.tostring(cases["DEV001"])  # passed
