"""NCCL's account in every renderer: text, terminal, JSON (round trip), HTML, per mesh dimension and per host."""

from __future__ import annotations

import io

from preflight.lib.nccl_summary import summarize
from preflight.model import JobReport, ReportMeta
from preflight.model.codec import decode, encode
from preflight.reports import html, nccl_table, terminal, text
from tests.checks.test_nccl_account import accounts

GROUPS = {"tp": [[0, 1], [2, 3]], "dp": [[0, 2], [1, 3]]}


def _report() -> JobReport:
    accs = accounts(env_of=lambda name: {"NCCL_IB_HCA": "mlx5_9"} if name == "b" else {})
    return JobReport(ReportMeta("srun", "1", "run", 4, 4, "a", 29500), nccl=summarize(accs, 0, GROUPS))


def test_each_dimension_says_what_carried_it():
    rows = {row[0]: row for row in nccl_table.dim_rows(_report())}
    assert rows["tp"][1:] == ["2", "2", "P2P/CUMEM"]
    assert rows["dp"][1:] == ["2", "0", "NET/IB/GDRDMA; NET/Socket on host b"]


def test_a_one_rank_job_says_nothing_was_connected_not_a_question_mark():
    """As an H200's one-rank run showed it: NCCL logged no channel for the world's one-rank communicator."""
    from preflight.model.nccl_account import NcclDimension, NcclSummary

    alone = NcclSummary(source="captured", ranks_read=1, dims=[NcclDimension("world", 1, 1, [])])
    report = JobReport(ReportMeta("none", "", "run", 1, 1, "a", 29500), nccl=alone)
    assert [row[3] for row in nccl_table.dim_rows(report)] == ["none: one rank"]
    four = _report()
    four.nccl.dims[0].transports = []
    assert nccl_table.dim_rows(four)[0][3] == "?"  # a bigger job whose logs said nothing: unknown


def test_text_terminal_html_and_json_show_the_account():
    report = _report()
    plain = text.render(report)
    assert nccl_table.TITLE in plain and "NET/IB/GDRDMA; NET/Socket on host b" in plain
    b = next(line for line in plain.splitlines() if line.startswith("b "))
    assert "Socket" in b and "OFF" in b and "eth0" in b
    out = io.StringIO()
    terminal.render(report, out, width=200)
    assert "NCCL's account" in out.getvalue() and "mlx5_9" in out.getvalue()
    page = html.render(report)
    assert 'id="nccl"' in page and "NET/IB/GDRDMA; NET/Socket on host b" in page
    again = decode(encode(report), JobReport)
    assert again.nccl == report.nccl


def test_no_account_no_section():
    report = JobReport(ReportMeta("srun", "1", "run", 4, 4, "a", 29500))
    assert nccl_table.rows(report) == [] and nccl_table.TITLE not in text.render(report)
    assert 'id="nccl"' not in html.render(report)
