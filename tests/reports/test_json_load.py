"""`preflight report`'s read (reports/json.loads) leaves the cyclic collector as it found it and
what it read out of the collector's generations (a 131,072-rank report: docs/performance.md)."""

from __future__ import annotations

import gc

import pytest

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
