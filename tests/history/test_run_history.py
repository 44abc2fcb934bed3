"""--history and --metrics in real runs (`preflight launch`, real gloo ranks, a real SQLite file).

A history that cannot be used (locked, read-only, corrupt, newer schema) is one info finding
(HIS001) with one line, and an output not written (reports/targets.py): the run that passed
without a history exits 4, its headline starting `NOT WRITTEN: --history`; the file is left
byte-identical. A usable one gains a run per run, with its hosts and
figures, and `preflight history` reads it back.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from tests.checks.test_config_multirank import by_id
from tests.helpers.ranks import read_json, run_cli

QUICK = ["launch", "-n", "2", "--ops", "all_reduce", "--sizes", "64KiB,256KiB", "--warmup", "1", "--iters", "3",
         "--skip", "gpu,nic"]


def _launch(tmp: Path, name: str, *extra: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    out = tmp / f"{name}.json"
    done = run_cli([*QUICK, "--json", str(out), "--quiet", *extra], env=env, timeout=240)
    assert out.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    return done.returncode, read_json(out)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict]:
    """The same run without a history: its exit code and report."""
    return _launch(tmp_path_factory.mktemp("baseline"), "baseline")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_unchanged_verdict(baseline: tuple[int, dict], code: int, report: dict) -> dict:
    """The findings are the baseline's plus HIS001; a pass becomes exit 4, the headline names the history."""
    assert baseline[0] == 0, baseline[1]["why"]
    assert (code, report["verdict"], report["exit_code"]) == (4, "incomplete", 4)
    assert report["why"].startswith("NOT WRITTEN: --history sqlite:///"), report["why"]
    [finding] = by_id(report, "HIS001")
    assert finding["severity"] == "info" and "\n" not in finding["message"]
    return finding


def test_history_records_each_run_and_history_reads_it_back(tmp_path: Path, baseline: tuple[int, dict]) -> None:
    url = f"sqlite:///{tmp_path / 'history.db'}"
    codes = [_launch(tmp_path, f"run{i}", env={"PREFLIGHT_HISTORY": url}) for i in range(2)]
    for code, report in codes:
        assert code == baseline[0] and not by_id(report, "HIS001"), report["findings"]
    shown = run_cli(["history", "--history", url, "--json"])
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert [r["run_id"] for r in document["runs"]] == [codes[1][1]["meta"]["run_id"], codes[0][1]["meta"]["run_id"]]
    host = codes[0][1]["probes"][0]["hosts"][0]
    for run, (_, report) in zip(document["runs"], reversed(codes)):
        assert run["hosts"] == [{"host": host, "failed": False}]
        # Every verified probe figure of the run, per host, as the report measured it.
        expected = sorted((p["dim"], p["op"], p["size_bytes"], round(p["busbw_gbps"], 9)) for p in report["probes"])
        assert sorted((f["dim"], f["op"], f["size_bytes"], round(f["value"], 9)) for f in run["figures"]) == expected


def test_locked_history_leaves_verdict_and_exit_code(tmp_path: Path, baseline: tuple[int, dict]) -> None:
    db = tmp_path / "history.db"
    url = f"sqlite:///{db}"
    _launch(tmp_path, "first", "--history", url)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another job holds the history's write lock throughout
    try:
        code, report = _launch(tmp_path, "locked", "--history", url, "--history-timeout", "1")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "locked" in _assert_unchanged_verdict(baseline, code, report)["message"]
    assert sqlite3.connect(db).execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_read_only_history_leaves_verdict_and_exit_code(tmp_path: Path, baseline: tuple[int, dict]) -> None:
    db = tmp_path / "history.db"
    _launch(tmp_path, "first", "--history", f"sqlite:///{db}")
    before = _digest(db)
    code, report = _launch(tmp_path, "ro", "--history", f"sqlite:///file:{db}?mode=ro&uri=true")
    assert "read-only" in _assert_unchanged_verdict(baseline, code, report)["message"]
    assert _digest(db) == before


def test_corrupt_history_is_never_overwritten(tmp_path: Path, baseline: tuple[int, dict]) -> None:
    db = tmp_path / "history.db"
    db.write_bytes(b"\x00garbage that is not SQLite\n" * 200)
    before = _digest(db)
    code, report = _launch(tmp_path, "corrupt", "--history", f"sqlite:///{db}")
    assert "corrupt" in _assert_unchanged_verdict(baseline, code, report)["message"]
    assert _digest(db) == before
    shown = run_cli(["history", "--history", f"sqlite:///{db}"])
    assert shown.returncode == 2 and len(shown.stderr.strip().splitlines()) == 1 and "corrupt" in shown.stderr


def test_newer_schema_history_is_never_overwritten(tmp_path: Path, baseline: tuple[int, dict]) -> None:
    db = tmp_path / "history.db"
    _launch(tmp_path, "first", "--history", f"sqlite:///{db}")
    raw = sqlite3.connect(db)
    with raw:
        raw.execute("UPDATE preflight_meta SET value = '7' WHERE key = 'schema_version'")
    raw.close()  # the last connection: SQLite checkpoints the WAL into the file, whose bytes are then compared
    before = _digest(db)
    code, report = _launch(tmp_path, "newer", "--history", f"sqlite:///{db}")
    assert "newer" in _assert_unchanged_verdict(baseline, code, report)["message"]
    assert _digest(db) == before


def test_bad_history_url_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for url in ("mysql://x/y", "sqlite://", "not a url"):
        done = run_cli(["--history", url, "--skip", "probe"])
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (url, done.stderr)
        assert "--history" in done.stderr
    for rule in ("5/2", "x", "3", "0/10"):
        done = run_cli(["--history", f"sqlite:///{tmp_path / 'h.db'}", "--flaky", rule, "--skip", "probe"])
        assert done.returncode == 2 and "--flaky" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_history_password_never_reaches_the_report(tmp_path: Path) -> None:
    from preflight.commands.cli import build_parser, options_from_args

    argv = ["run", "--history", "postgresql://pf:s3cret@db.example/preflight", "--skip", "probe"]
    options = options_from_args(build_parser().parse_args(argv), argv)
    assert "s3cret" not in options.command_line and "postgresql://pf:***@db.example/preflight" in options.command_line
    assert options.history.url.endswith("pf:s3cret@db.example/preflight")  # the connection still has it
