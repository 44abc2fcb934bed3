"""The HTML report's charts (preflight/reports/charts.py) draw whatever a loaded report holds."""

from __future__ import annotations

import math

import pytest

from preflight.model import ProbeResult
from preflight.reports import charts


def _result(busbw: float, size: int = 1 << 20, group: int = 0) -> ProbeResult:
    return ProbeResult("tp", "all_reduce", size, group, [0, 1], ["h1"], 0.001, busbw, busbw)


@pytest.mark.parametrize("busbw", [1e308, math.inf, 1.7e308, 0.0, -5.0])
def test_a_busbw_no_link_has_draws_its_charts_without_raising(busbw: float) -> None:
    # 1e308 from a mutated report was an OverflowError (an integer power of ten past every float).
    results = [_result(busbw), _result(3.0, group=1), _result(2.0, size=1 << 24)]
    assert charts.busbw_by_size_svg("tp", results).startswith("<svg")
    assert charts.groups_svg("tp", results, expected=None).startswith("<svg")


def test_the_axis_ends_at_one_two_or_five_times_a_power_of_ten_above_the_largest_figure() -> None:
    figures = (0.0, 0.7, 1.0, 1.3, 3.0, 7.0, 150.6)
    assert [charts._nice_max(v) for v in figures] == [1.0, 1.0, 1.0, 2.0, 5.0, 10.0, 200.0]
