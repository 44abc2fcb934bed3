"""`preflight report`'s read (reports/json.loads) leaves the cyclic collector as it found it and
what it read out of the collector's generations (a 131,072-rank report: docs/performance.md)."""

from __future__ import annotations

import gc
import json

import pytest

from preflight.model import JobReport, ReportMeta, codec
from preflight.model.codec import BadPayload
from preflight.reports import json as json_report
from tests.helpers.synthetic import big_report


@pytest.mark.parametrize("enabled", [True, False])
def test_a_load_restores_the_collector_and_freezes_what_it_read(enabled: bool) -> None:
    data = json_report.dumps_bytes(big_report(world_size=64, ranks_per_host=8, mesh="dp8,tp8", env_size=8))
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        frozen = gc.get_freeze_count()
        report = json_report.loads(data)
        assert gc.isenabled() is enabled
        assert gc.get_freeze_count() > frozen  # the report's objects among them
        assert len(report.ranks) == 64 and json_report.dumps_bytes(report) == data
    finally:  # what it froze stays so, as the worker's own heap is (tests/conftest.py, pytest_collection_finish)
        (gc.enable if was else gc.disable)()


def test_a_report_is_parsed_once_and_equals_the_one_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JobReport's fields and the rank table come out of one parse of the document (a second one
    cost 0.13 s at 131,072 ranks)."""
    report = big_report(world_size=16, ranks_per_host=8, mesh="dp2,tp8", env_size=4)
    data = json_report.dumps_bytes(report)
    parses = []
    real = json_report.decode
    monkeypatch.setattr(json_report, "decode", lambda raw, into, **kw: parses.append(into) or real(raw, into, **kw))
    again = json_report.loads(data)
    assert len(parses) == 1 and type(again) is JobReport and again == report


def test_a_newer_report_that_does_not_decode_is_refused_for_its_schema() -> None:
    """A report whose fields do not fit says which preflight wrote it when that was a newer one, and
    names the field when it says this preflight's own schema."""
    document = json.loads(json_report.dumps(JobReport(meta=ReportMeta("env", "", "r", 1, 1, "h", 1))))
    document["findings"] = {"a newer shape": 1}
    document["schema"] = json_report.SCHEMA + 1
    with pytest.raises(BadPayload, match=f"schema {json_report.SCHEMA + 1}: .*newer preflight"):
        json_report.loads(json.dumps(document))
    document["schema"] = json_report.SCHEMA
    with pytest.raises(BadPayload, match="findings"):
        json_report.loads(json.dumps(document))


def test_a_report_is_bounded_by_its_own_maximum_larger_than_any_other_document_s(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A report may be larger than any other document (a 131,072-rank job on GPU hosts: ~520 MB, past the
    codec's 256 MiB); past MAX_REPORT_BYTES it is one BadPayload (the bound scaled down here: a small file)."""
    assert json_report.MAX_REPORT_BYTES >= 2 * codec.MAX_DECODE_BYTES
    data = json_report.dumps_bytes(big_report(world_size=16, ranks_per_host=8, mesh="dp2,tp8", env_size=4))
    monkeypatch.setattr(json_report, "MAX_REPORT_BYTES", len(data))
    assert len(json_report.loads(data).ranks) == 16
    monkeypatch.setattr(json_report, "MAX_REPORT_BYTES", len(data) - 1)
    with pytest.raises(BadPayload, match="more than the maximum"):
        json_report.loads(data)
    path = tmp_path / "run.json"
    path.write_bytes(data)
    monkeypatch.setattr(json_report, "loads", lambda _: pytest.fail("read into memory"))  # refused by its size
    with pytest.raises(BadPayload, match=f"{len(data)} bytes is more than the maximum"):
        json_report.load(path)
