"""The one probe table of the text and terminal reports."""

from __future__ import annotations

from preflight.model import JobReport, ProbeResult, ReportMeta
from preflight.reports import text
from preflight.reports.probe_dims import probe_dimensions
from preflight.reports.probes_table import HEADERS, probe_rows


def report() -> JobReport:
    meta = ReportMeta(launcher="slurm", job_id="1", run_id="r", world_size=4, num_nodes=2, master_addr="n1",
                      master_port=1, mesh="dp2,tp2", expected_busbw_gbps={"dp": 40.0})
    probes = [
        ProbeResult("dp", "all_reduce", 64 << 20, 0, [0, 2], ["n1", "n2"], 0.01, 20.0, 40.0, nominal_gbps=50.0,
                    nominal_source="mlx5_0 port 1 400 Gb/sec"),
        ProbeResult("dp", "all_reduce", 64 << 20, 1, [1, 3], ["n1", "n2"], 0.02, 10.0, 20.0, nominal_gbps=50.0,
                    nominal_source="mlx5_0 port 1 400 Gb/sec"),
        ProbeResult("tp", "all_reduce", 64 << 20, 0, [0, 1], ["n1"], 0.001, 300.0, 300.0, verified=False),
    ]
    return JobReport(meta=meta, probes=probes, verdict="failed", exit_code=3)


def test_rows_give_spread_slowest_group_expected_and_fraction_of_nominal() -> None:
    rows = {row[0]: dict(zip(HEADERS, row)) for row in probe_rows(report())}
    dp, tp = rows["dp"], rows["tp"]
    assert (dp["size"], dp["groups"], dp["min"], dp["median"], dp["max"]) == ("64 MiB", "2", "20", "30", "40")
    assert dp["algbw"] == "15"  # nccl-tests' algbw beside the busbw: the groups' median (issue 45)
    assert dp["slowest group"].startswith("#1 ranks 1,3 on n[1-2]")
    assert dp["expected"] == "40 (--expect)" and dp["of nominal"] == "40%" and dp["data"] == "ok"
    assert tp["of nominal"] == "" and tp["expected"] == "none" and tp["data"] == "WRONG"


def test_text_report_shows_the_table() -> None:
    out = text.render(report())
    assert "algbw (bytes / time)" in out
    assert "busbw (as nccl-tests scales it)" in out and "of nominal" in out and "40%" in out


def test_dimensions_come_in_the_order_they_were_probed() -> None:
    meta = ReportMeta(launcher="env", job_id="", run_id="r", world_size=16, num_nodes=2, master_addr="n1",
                      master_port=1, mesh="pp2,dp2,tp4")
    probes = [ProbeResult(dim, "all_reduce", 1 << 20, 0, [0, 1], ["n1"], 0.01, 1.0, 1.0)
              for dim in ("pp", "dp", "tp", "world")]
    assert list(probe_dimensions(JobReport(meta=meta, probes=probes))) == ["pp", "dp", "tp", "world"]
