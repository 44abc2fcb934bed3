"""Terminal tables at 80 columns (rich, forced width): every figure whole, every line within 80.

A figure (a number, a size, an op name, a run id) is never split: the tables' figure columns keep
their width, text columns wrap between words, and a table too wide is split into parts that each
repeat its key columns (preflight/reports/fit_table.py)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest

from preflight.commands.history import print_tables
from preflight.model.history_records import FigureView, HistoryFilters, RunView
from preflight.reports import device_table, probes_table, terminal
from tests.helpers.synthetic import big_report
from tests.reports.test_device_table import _report as device_report

WIDTH = 80


def _assert_every_word_whole(out: str, rows: Sequence[Sequence[str]]) -> None:
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, max(lines, key=len)
    words = set(out.split())
    for row in rows:
        for cell in row:
            for word in cell.split():
                assert word in words, (word, cell)


def test_probe_table_at_80_columns_keeps_every_figure_whole() -> None:
    report = big_report(world_size=64, ranks_per_host=8, mesh="dp2,pp2,tp16")
    out = io.StringIO()
    terminal.render(report, out, width=WIDTH)
    rows = probes_table.probe_rows(report)
    assert rows and any(row[1] == "reduce_scatter" for row in rows)
    _assert_every_word_whole(out.getvalue(), rows)
    # A figure column's cell is whole on one line, beside its row's keys (dim, op, size).
    lines = out.getvalue().splitlines()
    for row in rows[:10]:
        assert any(line.split()[:4] == [row[0], row[1], *row[2].split()] for line in lines if line.strip()), row


def test_device_table_at_80_columns_keeps_every_figure_whole() -> None:
    report = device_report()
    out = io.StringIO()
    terminal.render(report, out, width=WIDTH)
    rows = device_table.device_rows(report)
    assert rows
    _assert_every_word_whole(out.getvalue(), rows)


def test_history_tables_at_80_columns_keep_ids_and_times_whole(capsys: pytest.CaptureFixture[str]) -> None:
    runs = [RunView(run_id=f"preflight-{i:02d}5f3a9c0d1e", job_id="", world_size=12, num_nodes=12,
                    mesh="", backend="gloo", started_at=f"2026-11-{i + 1:02d}T06:28:06+00:00",
                    verdict="passed with warnings", exit_code=0,
                    hosts=[{"host": f"node{h:03d}", "failed": h in (2, 5)} for h in range(12)],
                    figures=[FigureView(subject="node001", host="node001", gpu_uuid="", kind="busbw", dim="dp",
                                        op="reduce_scatter", size_bytes=64 << 20, group_size=2, group_hosts=2,
                                        value=12.3456 + i, unit="GB/s")])
            for i in range(3)]
    print_tables(runs, HistoryFilters(), [], width=WIDTH)
    out = capsys.readouterr().out
    rows = [[r.run_id, r.started_at, r.verdict, "node002, node005"] for r in runs]
    _assert_every_word_whole(out, rows)
    for run in runs:  # the id on one line, whole
        assert any(run.run_id in line for line in out.splitlines())
    assert "reduce_scatter" in out.split() and "13.3" in out.split()  # the trends table's figures too
