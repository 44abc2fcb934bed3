"""ProbeResult and the derived per dim x op x size summary survive the JSON round trip."""

from __future__ import annotations

import json

from preflight.model import JobReport, ProbeResult, ReportMeta, summarize_probes
from preflight.model.codec import from_builtins
from preflight.reports.json import dumps


def test_probe_results_round_trip_and_summary() -> None:
    probes = [ProbeResult("tp", "all_reduce", 1024, g, [2 * g, 2 * g + 1], ["a", "b"], 0.1 * (g + 1), 1.0, bw,
                          {2 * g: 0.1, 2 * g + 1: 0.1 * (g + 1)}, verified=g != 2, wrong_ranks=[4] if g == 2 else [])
              for g, bw in enumerate([3.0, 1.0, 2.0])]
    report = JobReport(meta=ReportMeta("env", "", "r", 6, 1, "127.0.0.1", 1), probes=probes)
    raw = json.loads(dumps(report))
    assert from_builtins(raw, JobReport) == report
    (summary,) = raw["probe_summary"]
    assert (summary["busbw_min_gbps"], summary["busbw_median_gbps"], summary["busbw_max_gbps"]) == (1.0, 2.0, 3.0)
    assert summary["slowest_group"] == 1 and summary["slowest_ranks"] == [2, 3] and summary["verified"] is False
    assert summarize_probes(probes)[0].time_s == 0.2
    assert summary["algbw_median_gbps"] == 1.0 and raw["probes"][0]["algbw_gbps"] == 1.0  # beside busbw, as nccl-tests
