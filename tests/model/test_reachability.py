"""The reachability step's outcome as a typed model value: tolerant where it enters, the JSON report compatible."""

from __future__ import annotations

import json

from preflight.model import JobReport, ReachabilityOutcome, ReportMeta
from preflight.reports.json import dumps, loads

# A report's reachability as written before it was typed: no `rank` on placeholder entries,
# `skipped` only on skipped probes.
OLD = {"roster": [{"host": "a", "rank": 0, "address": "10.0.0.1", "interface": "ib0", "port": 4000, "error": ""},
                  {"host": "b", "address": "", "interface": "", "port": 0, "error": "published no listener in time"}],
       "results": {"a": [{"target": "b", "address": "", "interface": "", "ok": False,
                          "error": "no listener: published no listener in time", "time_s": 0.0, "skipped": True}]},
       "missing": ["b"], "k": 2, "connect_timeout_s": 2.0}


def _report(reachability: object) -> str:
    meta = ReportMeta("env", "", "r", 2, 2, "127.0.0.1", 29500)
    raw = json.loads(dumps(JobReport(meta)))
    raw["reachability"] = reachability
    return json.dumps(raw)


def test_a_report_written_before_loads_typed_and_writes_the_same_fields() -> None:
    report = loads(_report(OLD))
    outcome = report.reachability
    assert isinstance(outcome, ReachabilityOutcome)
    assert [e.host for e in outcome.roster] == ["a", "b"] and outcome.roster[1].rank is None
    assert outcome.results["a"][0].skipped and outcome.missing == ["b"] and outcome.k == 2
    written = json.loads(dumps(report))["reachability"]
    assert set(written) == set(OLD)
    assert all(set(old) <= set(new) for old, new in zip(OLD["roster"], written["roster"]))
    assert set(OLD["results"]["a"][0]) <= set(written["results"]["a"][0])


def test_an_unreadable_record_is_a_host_without_a_listener_or_a_result_never_an_error() -> None:
    """A foreign or corrupt value under a listener or result key cannot make rank 0 raise."""
    outcome = ReachabilityOutcome.from_collected(
        roster=[{"host": "a", "port": "x" * 10}, "garbage", {"host": "c", "port": 5}],
        results={"a": [{"target": "c", "ok": "perhaps"}], "c": [{"target": "a", "ok": True}], "d": 7},
        missing=[], k=2, connect_timeout_s=2.0)
    assert [e.host for e in outcome.roster] == ["a", "?", "c"]
    assert "cannot be read" in outcome.roster[0].error and outcome.roster[2].error == ""
    assert outcome.missing == ["a", "d"] and outcome.results["c"][0].ok
