"""Rich on a terminal, plain text in logs: the same report, the same facts."""

from __future__ import annotations

import io

import pytest

from preflight.model import Finding, JobReport, ReportMeta, Severity
from preflight.reports import terminal, text


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def report() -> JobReport:
    return JobReport(
        meta=ReportMeta(launcher="slurm", job_id="77", run_id="r", world_size=8, num_nodes=2, master_addr="gpu[001]",
                        master_port=1, restart_count=2),
        findings=[Finding("NCCL001", Severity.ERROR, "TORCH_NCCL_ASYNC_ERROR_HANDLING=0 [bold]x[/bold]", "unset it",
                          [3, 4, 5, 7], ["gpu002", "gpu003"])],
        bad_hosts=["gpu002", "gpu003"], verdict="failed", exit_code=3, why="1 error(s)",
    )


def test_terminal_uses_rich_only_on_a_tty_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert terminal.wants_rich(FakeTTY())
    assert not terminal.wants_rich(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not terminal.wants_rich(FakeTTY())


def test_terminal_shows_verdict_finding_hint_and_keeps_brackets_literal() -> None:
    stream = FakeTTY()
    terminal.render(report(), stream)
    out = stream.getvalue()
    assert "FAILED" in out and "NCCL001" in out and "unset it" in out
    assert "[bold]x[/bold]" in out  # user text is never rich markup
    assert "--exclude=gpu[002-003]" in out
    assert "restart #2" in out


def test_text_is_plain_and_names_ranks_and_hosts() -> None:
    out = text.render(report())
    assert "\x1b[" not in out
    assert out.startswith("preflight: FAILED (exit 3)")
    assert "ranks 3-5,7 on gpu[002-003]" in out
    assert "--exclude=gpu[002-003]" in out


def _words(text_out: str) -> str:
    return " ".join(text_out.replace("│", " ").replace("┃", " ").split())


def test_rich_and_plain_views_show_the_same_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Terminal parity: every section and line of the plain text is in the rich view too."""
    from tests.helpers.synthetic import big_report

    monkeypatch.setenv("COLUMNS", "400")  # wide enough that rich folds no cell: compare whole texts
    full = big_report(world_size=64, ranks_per_host=8, mesh="dp8,tp8")  # host gpu0007 drifts
    stream = FakeTTY()
    terminal.render(full, stream)
    rich_out, plain_out = _words(stream.getvalue()), text.render(full)
    expected = [full.verdict.upper(), full.why, *text.run_lines(full), text.DRIFT_TITLE, "collective probes"]
    expected += [f.message for f in full.findings] + [f.check_id for f in full.findings]
    rows, _ = text.drift_rows(full)
    expected += [cell for row in rows for cell in row]
    assert any(line.startswith("mesh dp8,tp8, backend") for line in text.run_lines(full))
    assert rows, "the synthetic report has drift"
    for item in expected:
        assert _words(item) in _words(plain_out), item
        assert _words(item) in rich_out, item
