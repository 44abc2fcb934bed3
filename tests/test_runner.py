"""The whole run with real env:// ranks: real processes, a real c10d store, real deadlines."""

from __future__ import annotations

import signal
import time

from preflight.model import ExitCode
from preflight.reports.json import load as load_report
from tests.helpers.ranks import Placement, free_port, spawn_env_ranks, start_rank

FAST = ["--skip", "probe"]


def test_four_clean_ranks_pass_and_rank0_reports_all(tmp_path) -> None:
    runs = spawn_env_ranks(4, [*FAST, "--json", str(tmp_path / "r.json"), "--timeout", "30"])
    assert {r.returncode for r in runs.values()} == {0}, [r.stdout + r.stderr for r in runs.values()]
    assert "PASSED" in runs[0].stdout
    report = load_report(tmp_path / "r.json")
    assert [f.rank for f in report.ranks] == [0, 1, 2, 3]
    assert report.meta.launcher == "env" and report.exit_code == 0 and not report.findings
    assert not report.meta.authenticated  # no PREFLIGHT_SECRET (one host: no PORT005)


def test_missing_rank_is_named_within_timeout_and_every_started_rank_exits_3(tmp_path) -> None:
    timeout = 4.0
    runs = spawn_env_ranks(4, [*FAST, "--timeout", str(timeout), "--json", str(tmp_path / "r.json")], absent=[3])
    assert {r.returncode for r in runs.values()} == {int(ExitCode.FAILED)}
    report = load_report(tmp_path / "r.json")
    assert report.missing_ranks == [3]
    [missing] = [f for f in report.findings if f.check_id == "RANK001"]
    assert missing.ranks == [3] and "rank 3 did not report" in missing.message
    assert report.meta.duration_s <= timeout + 2.0
    assert "RANK001" in runs[0].stdout


def test_shared_dir_carries_a_rank_that_cannot_reach_the_store(tmp_path) -> None:
    # Rank 2 is pointed at an address where no store listens: it falls back to --out-dir.
    args = [*FAST, "--timeout", "16", "--out-dir", str(tmp_path / "shared"), "--json", str(tmp_path / "r.json")]
    runs = spawn_env_ranks(3, args, place={2: Placement(env={"MASTER_PORT": str(free_port())})})
    report = load_report(tmp_path / "r.json")
    assert [f.rank for f in report.ranks] == [0, 1, 2] and not report.missing_ranks
    store_failed = [f for f in report.findings if f.check_id == "RUN001"]
    assert store_failed and store_failed[0].ranks == [2]
    # The disagreement itself is a real error, and rank 2 learns the verdict through the dir too.
    assert any(f.check_id == "RANK003" and f.ranks == [2] for f in report.findings)
    assert {r.returncode for r in runs.values()} == {int(ExitCode.FAILED)}
    assert (tmp_path / "shared").is_dir()


def test_duplicate_rank_is_reported(tmp_path) -> None:
    runs = spawn_env_ranks(3, [*FAST, "--timeout", "5", "--json", str(tmp_path / "r.json")],
                           place={2: Placement(env={"RANK": "1"})})
    report = load_report(tmp_path / "r.json")
    ids = {f.check_id: f for f in report.findings}
    assert ids["RANK002"].ranks == [1]
    assert ids["RANK001"].ranks == [2]
    assert runs[0].returncode == int(ExitCode.FAILED)


def test_sigterm_still_writes_a_report_with_an_incomplete_verdict(tmp_path) -> None:
    port = free_port()
    proc = start_rank(0, 2, [*FAST, "--timeout", "60", "--json", str(tmp_path / "r.json")], port=port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _listening(port):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == int(ExitCode.INCOMPLETE), out + err
    report = load_report(tmp_path / "r.json")
    assert any(f.check_id == "RUN004" and "SIGTERM" in f.message for f in report.findings)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_rank_0_killed_before_the_verdict_each_rank_reports_alone_in_the_shared_dir(tmp_path) -> None:
    """Rank 0 dies after the cross checks: the others write their own report to --out-dir, blame rank 0, exit 4."""
    port, shared = free_port(), tmp_path / "shared"
    # Probes on: rank 0 is still working (heartbeat, store up) when it is killed, not already done.
    args = ["run", "--timeout", "20", "--out-dir", str(shared), "--ops", "all_reduce", "--sizes", "64KiB",
            "--probe-timeout", "5"]
    procs = {rank: start_rank(rank, 3, args, port=port) for rank in range(3)}
    zero = procs[0]
    assert zero.stderr is not None
    for line in zero.stderr:  # rank 0's phase lines
        if "cross checks done" in line:
            break
    zero.kill()
    zero.communicate(timeout=30)
    for rank in (1, 2):
        out, err = procs[rank].communicate(timeout=180)  # "does not hang": the heartbeat stops, they give up
        assert procs[rank].returncode == int(ExitCode.INCOMPLETE), out + err
        assert "no verdict from rank 0" in out
        [report_file] = shared.rglob(f"rank-{rank}-report.json")
        report = load_report(report_file)
        [lost] = [f for f in report.findings if f.check_id == "RUN007"]
        assert lost.ranks == [0] and report.exit_code == int(ExitCode.INCOMPLETE)
        assert [f.rank for f in report.ranks] == [rank]


def test_a_reused_out_dir_is_not_read_as_this_run_and_the_rank_that_never_started_is_missing(tmp_path) -> None:
    """Two env:// runs without a job id share the run id `env`; their nonces tell their files apart."""
    shared = tmp_path / "shared"
    first = spawn_env_ranks(3, [*FAST, "--timeout", "30", "--out-dir", str(shared)])
    assert {r.returncode for r in first.values()} == {0}
    assert len(list(shared.rglob("rank-2.*.json"))) == 1  # rank 2's payload, named by the first run's nonce
    runs = spawn_env_ranks(3, [*FAST, "--timeout", "4", "--out-dir", str(shared), "--json", str(tmp_path / "r.json")],
                           absent=[2])
    report = load_report(tmp_path / "r.json")
    assert report.missing_ranks == [2] and runs[0].returncode == int(ExitCode.FAILED)
    [stale] = [f for f in report.findings if f.check_id == "RUN009"]
    assert "rank-2." in stale.message and report.meta.run_nonce and report.meta.run_nonce not in stale.message
