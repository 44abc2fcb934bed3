"""The typed readers beside the checks that write `Finding.data` (what steps/host_choice.py reads):
each reads back exactly what its check writes, also after the report's JSON round trip, and
gives None (never an exception) for data it cannot read (a hand-edited or foreign report)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from preflight.checks import device_probe, history_findings, localization_findings, probe_findings
from preflight.model import Finding, Severity
from preflight.model.codec import decode, encode
from preflight.model.device_probe import DeviceRow, Slow
from preflight.model.history_records import Drop, FigureRow, OwnPast
from preflight.model.probe_faults import Confirmed, Straggler


def _through_json(findings: list[Finding]) -> Finding:
    """The one finding as a reloaded report holds it (the model's codec both ways)."""
    (finding,) = findings
    return decode(encode(finding), Finding)


def _confirmed(alone: float) -> Confirmed:
    return Confirmed(pair=(3, 0), first_fraction=0.6, fraction=alone, gbps=4.0, reference_gbps=10.0,
                     false_alarm_p=1e-4)


def test_slow_host_readers_read_what_bw005_and_bw012_write() -> None:
    bw005 = localization_findings.slow_host.report(rank=3, host="n2", confirmed=_confirmed(0.35), partner=0,
                                                   partner_host="n1", median_gbps=8.0)
    assert localization_findings.slow_host_fraction(_through_json(bw005)) == pytest.approx(0.35)
    bw012 = localization_findings.slow_host_group_tested.report(host="n2", ranks=[3], fractions=[0.5, 0.3],
                                                                partners=["n1", "n4"], reference_gbps=9.0,
                                                                rounds=3, seconds=1.5)
    assert localization_findings.slow_host_fraction(_through_json(bw012)) == pytest.approx(0.3)  # the lowest


def test_slow_link_reader_reads_what_bw006_writes() -> None:
    bw006 = localization_findings.slow_link.report(ranks=[2, 5], hosts=["n1", "n3"], confirmed=_confirmed(0.45))
    assert localization_findings.slow_link_fraction(_through_json(bw006)) == pytest.approx(0.45)


def test_straggler_reader_prefers_the_confirming_pass() -> None:
    def bw003(confirm: float | None) -> Finding:
        return _through_json(probe_findings.straggler_group.report(
            Straggler(dim="tp", op="all_reduce", size_bytes=1 << 20, group_index=2, ranks=[4, 5], hosts=["n3"],
                      busbw_gbps=3.0, siblings_median_gbps=10.0, confirm_busbw_gbps=confirm,
                      confirm_siblings_median_gbps=8.0 if confirm is not None else None), 0.8))

    assert probe_findings.straggler_figures(bw003(4.0)) == probe_findings.StragglerFigures("tp", 2, 0.5)
    assert probe_findings.straggler_figures(bw003(None)).fraction == pytest.approx(0.3)


def test_slow_device_reader_reads_what_dev003_to_dev005_write() -> None:
    slow = Slow(row=DeviceRow(rank=1, host="n2", kind="cuda", name="H100", index=1, uuid="GPU-1"),
                figure="gemm_bf16", unit="TFLOP/s", value=300.0, siblings_median=600.0, passes=[300.0, 310.0],
                siblings_passes=[600.0, 605.0], siblings=7, ratio=0.8)
    for check in (device_probe.matrix_slow, device_probe.copy_slow, device_probe.host_link_slow):
        device = device_probe.slow_device(_through_json(check.report(slow)))
        assert device == device_probe.SlowDevice("gemm_bf16", 0.5), check.id


def test_drop_reader_reads_what_his002_writes() -> None:
    row = FigureRow(kind="collective", subject="n2", value=30.0, unit="GB/s", host="n2", dim="dp", op="all_reduce",
                    size_bytes=1 << 26)
    past = OwnPast(subject="n2", key=("collective", "dp", "all_reduce", 1 << 26, 2, 2), values=[60.0] * 6)
    his002 = history_findings.below_own_history.report(Drop(row=row, past=past, margin=0.25))
    assert history_findings.drop_fraction(_through_json(his002)) == pytest.approx(0.5)


@pytest.mark.parametrize("data", [{}, {"fraction": "0.5", "fractions": "x", "value": True, "median": 0},
                                  {"fractions": [None, "a"], "siblings_median": [], "group_index": "2",
                                   "confirm_busbw_gbps": {}, "dim": ["x" * 10_000]}])
def test_unreadable_data_is_none_never_an_exception(data: dict) -> None:
    finding = Finding("BW003", Severity.WARN, "m", data=data)
    assert localization_findings.slow_host_fraction(finding) is None
    assert localization_findings.slow_link_fraction(finding) is None
    figures = probe_findings.straggler_figures(finding)
    assert figures.fraction is None and figures.group_index is None and len(figures.dim) <= 64
    assert device_probe.slow_device(finding).fraction is None
    assert history_findings.drop_fraction(finding) is None


def test_the_spare_node_choice_reads_no_key_of_finding_data() -> None:
    """steps/host_choice.py calls the readers: no `.data` of a finding, no string subscript or .get there."""
    source = Path(__import__("preflight.steps.host_choice", fromlist=["x"]).__file__).read_text()
    touches = [ast.unparse(node) for node in ast.walk(ast.parse(source))
               if isinstance(node, ast.Attribute) and node.attr == "data"]
    assert not touches, touches
