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
