"""`preflight history` on a real SQLite history of FAKE runs (tests/helpers/synthetic.history_report):
the terminal tables, --json (every run shown in `runs`), --html, the filters, prune, and bad input."""

from __future__ import annotations

import datetime
import itertools
import json
import re
import statistics
from pathlib import Path

import pytest

from preflight.commands.cli import main
from preflight.history.record import write_run
from preflight.history.store import transaction
from tests.helpers.synthetic import history_report

NOW = datetime.datetime.now(datetime.timezone.utc)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """12 runs over 4 hosts, one a day (the oldest 40 days ago); n3 fails in runs 3 and 9, n2 slows in the last."""
    url = f"sqlite:///{tmp_path_factory.mktemp('history') / 'h.db'}"
    for i in range(12):
        started = (NOW - datetime.timedelta(days=40 if i == 0 else 12 - i)).isoformat(timespec="seconds")
        report = history_report(f"r{i}", ["n1", "n2", "n3", "n4"], mesh="dp2,tp2", started_at=started,
                                bad_hosts=["n3"] if i in (3, 9) else [], slow_hosts={"n2": 0.5} if i == 11 else None)
        with transaction(url, 10.0, write=True) as conn:
            write_run(conn, report)
    return url


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["history", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_holds_every_run_shown_newest_first(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    document = _json(capsys, "--history", url)
    assert [r["run_id"] for r in document["runs"]] == [f"r{i}" for i in range(11, -1, -1)]
    assert document["runs"][0]["hosts"] == [{"host": h, "failed": False} for h in ("n1", "n2", "n3", "n4")]
    n3 = next(h for h in document["hosts"] if h["host"] == "n3")
    assert (n3["runs"], n3["failed"]) == (12, 2)


def test_filters(url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_HISTORY", url)  # the same history without --history
    by_host = _json(capsys, "--host", "n2", "--last", "3")
    assert [r["run_id"] for r in by_host["runs"]] == ["r11", "r10", "r9"]
    assert {f["subject"] for r in by_host["runs"] for f in r["figures"]} == {"n2"}
    latest = {(f["dim"], f["size_bytes"]): f["value"] for f in by_host["runs"][0]["figures"]}
    before = {(f["dim"], f["size_bytes"]): f["value"] for f in by_host["runs"][1]["figures"]}
    assert all(latest[k] < 0.6 * before[k] for k in latest)  # the slowdown is in n2's record
    failed = _json(capsys, "--check", "GPU003")
    assert [r["run_id"] for r in failed["runs"]] == ["r9", "r3"]
    assert all(f["check_id"] == "GPU003" for r in failed["runs"] for f in r["findings"])
    recent = _json(capsys, "--since", "108h")  # 4.5 days: runs 1 to 4 days old
    assert [r["run_id"] for r in recent["runs"]] == ["r11", "r10", "r9", "r8"]
    since_date = _json(capsys, "--since", (NOW - datetime.timedelta(hours=60)).isoformat())
    assert [r["run_id"] for r in since_date["runs"]] == ["r11", "r10"]
    assert _json(capsys, "--host", "nosuch")["runs"] == []


def test_terminal_tables_show_trends(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "--history", url, "--host", "n2"]) == 0
    out = capsys.readouterr().out
    assert "runs with n2" in out and "trends per host" in out
    assert "dp all_reduce 64 MiB" in out and "tp all_reduce 64 MiB" in out


def test_html_has_a_trend_chart_per_figure(url: str, tmp_path: Path) -> None:
    page = tmp_path / "history.html"
    assert main(["history", "--history", url, "--html", str(page)]) == 0
    text = page.read_text()
    charts = re.findall(r'<figure id="pf-trend-\d+"><figcaption><strong>([^<]+)</strong>(.*?)</figure>', text, re.S)
    assert {title for title, _ in charts} == {"dp all_reduce 1 MiB", "dp all_reduce 64 MiB", "tp all_reduce 1 MiB",
                                              "tp all_reduce 64 MiB"}
    for _, chart in charts:  # a line per host, a point per run (12 runs)
        assert set(re.findall(r'<polyline class="trend" data-subject="([^"]+)"', chart)) == {"n1", "n2", "n3", "n4"}
        assert chart.count('<circle class="point') == 4 * 12
        # Runs 3 and 9 failed: their points ringed, a dashed line across each chart.
        assert chart.count('<circle class="point failed"') == 4 * 2 and chart.count('class="failed-run"') == 2
    assert "<script" not in text and "://" not in text.split("<body>")[0]  # inline SVG: no script, no network
    assert text.index('id="runs"') < text.index('id="trends"')  # the runs table first
    assert len(re.findall(r'<tr class="run run-failed"', text)) == 2


def test_prune_deletes_old_runs_with_their_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    for i, age in enumerate((100, 95, 10)):
        started = (NOW - datetime.timedelta(days=age)).isoformat(timespec="seconds")
        with transaction(url, 10.0, write=True) as conn:
            write_run(conn, history_report(f"p{i}", ["a", "b"], started_at=started))
    assert main(["history", "prune", "--older-than", "90d", "--history", url]) == 0
    assert "pruned 2 run(s)" in capsys.readouterr().out
    assert [r["run_id"] for r in _json(capsys, "--history", url)["runs"]] == ["p2"]
    with transaction(url, 10.0, write=False) as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM figures").scalar() == 4  # p2's: 2 hosts x 2 sizes


@pytest.mark.parametrize("args", [["--since", "yesterday"], ["--last", "0"], ["--last", "٣"], ["--timeout", "nan"],
                                  ["prune"], ["prune", "--older-than", "3y"], ["exclude"],
                                  ["exclude", "--flaky", "5/2"], ["--history", "mysql://x/y"]])
def test_bad_input_is_one_line_and_exit_2(url: str, args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "--history", url, *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("preflight: error:"), err


def test_missing_history_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFLIGHT_HISTORY", raising=False)
    assert main(["history"]) == 2
    assert "PREFLIGHT_HISTORY" in capsys.readouterr().err
    assert main(["history", "--history", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "no history" in capsys.readouterr().err and not (tmp_path / "none.db").exists()


def test_gpu_filter_follows_one_gpu_by_uuid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    for i in range(3):
        with transaction(url, 10.0, write=True) as conn:
            write_run(conn, history_report(f"g{i}", ["a", "b"], gpus=True))
    with transaction(url, 10.0, write=True) as conn:  # a run without that GPU
        write_run(conn, history_report("other", ["c", "d"], gpus=True))
    document = _json(capsys, "--history", url, "--gpu", "GPU-b-1")
    assert [r["run_id"] for r in document["runs"]] == ["g2", "g1", "g0"]
    assert {f["subject"] for r in document["runs"] for f in r["figures"]} == {"GPU-b-1"}


def test_piped_history_prints_whole_run_ids_and_times(tmp_path: Path) -> None:
    """`preflight history | cat`: not a terminal, so no table is fitted to 80 columns: every id whole."""
    from tests.helpers.ranks import run_cli

    url = f"sqlite:///{tmp_path / 'h.db'}"
    ids = [f"preflight-launch-{i}-{'0123456789abcdef' * 4}" for i in range(3)]  # 83 characters: wider than 80
    for i, run_id in enumerate(ids):
        started = (NOW - datetime.timedelta(hours=3 - i)).isoformat(timespec="seconds")
        with transaction(url, 10.0, write=True) as conn:
            write_run(conn, history_report(run_id, ["n1", "n2"], mesh="dp2", started_at=started))
    for extra in ([], ["--wide"]):
        done = run_cli(["history", "--history", url, *extra], env={"COLUMNS": "80"})
        assert done.returncode == 0, done.stderr
        for run_id in ids:
            [line] = [line for line in done.stdout.splitlines() if run_id in line]
            assert "+00:00" in line  # its start time, whole, on the same line


def test_chart_axis_is_time_proportional_and_ids_are_counted(url: str, tmp_path: Path) -> None:
    """Run 0 is 28 days before run 1, the rest a day apart: its gap on the axis is ~28 times theirs."""
    from preflight.reports.history_html import counted_ids

    page = tmp_path / "history.html"
    assert main(["history", "--history", url, "--html", str(page)]) == 0
    chart = page.read_text().split('<figure id="pf-trend-0">', 1)[1].split("</figure>", 1)[0]
    xs = sorted(float(x) for x in re.findall(r'<circle class="point[^"]*"[^>]*? cx="([0-9.]+)"', chart))[::4]
    gaps = [b - a for a, b in itertools.pairwise(xs)]
    assert len(gaps) == 11 and 20 < gaps[0] / statistics.mean(gaps[1:]) < 40, gaps
    assert counted_ids([{"check_id": "BW003"}, {"check_id": "BW003"}, {"check_id": "BW004"},
                        {"check_id": "BW013"}]) == ["BW003 (2)", "BW004", "BW013"]


@pytest.mark.parametrize("flag", ["--json", "--html", "--exclude-file"])
def test_an_unwritable_output_is_one_line_and_exit_2(url: str, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    action = ["exclude", "--flaky"] if flag == "--exclude-file" else []
    assert main(["history", *action, "--history", url, flag, "/proc/preflight-nope/out"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"cannot write {flag} /proc/preflight-nope/out" in err
