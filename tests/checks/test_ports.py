"""Rendezvous port checks, fired for real: a held MASTER_PORT, a second job on the same port,
a port in the ephemeral range, a privileged port as non-root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from preflight.model import Severity
from preflight.steps.gather.master_port import ephemeral_range, port_holders, port_in_use
from tests.helpers.facts import rank_facts, run
from tests.helpers.ranks import PYTHON, base_env, free_port, read_json, spawn_env_ranks, start_rank
from tests.helpers.tools import require

HOLD = (
    "import socket, sys\n"
    "s = socket.socket(); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen()\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.fixture
def held_port():
    """A port held by a plain listener (not a store) in another process, and that process."""
    port = free_port()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        yield port, holder
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_port_facts_name_the_holder(held_port) -> None:
    port, holder = held_port
    assert port_in_use(port)
    assert holder.pid in [h.pid for h in port_holders(port)]
    assert not port_in_use(free_port())
    low, high = ephemeral_range() or (0, 0)
    assert 0 < low <= high


def test_held_master_port_fails_fast_on_every_rank(held_port, tmp_path: Path) -> None:
    port, holder = held_port
    report = tmp_path / "r.json"
    # A long --timeout, so "did not wait it out" can have generous headroom on a loaded machine.
    runs = spawn_env_ranks(2, ["--timeout", "60", "--skip", "probe", "--json", str(report)], port=port,
                           common_env={"PREFLIGHT_JOB_ID": "4242"}, timeout=120)
    zero, one = runs[0], runs[1]
    assert zero.returncode == 3, zero.stdout + zero.stderr
    # Rank 0 exits 3 naming the port and the holder's pid without waiting out --timeout (60 s);
    # the phases show it did not wait at all.
    assert zero.elapsed_s < 50, zero.elapsed_s
    assert sum(read_json(report)["meta"]["phases"].values()) < 5.0
    assert f"MASTER_PORT {port}" in zero.stdout and f"pid {holder.pid}" in zero.stdout, zero.stdout
    found = {f["check_id"]: f for f in read_json(report)["findings"]}
    assert found["PORT001"]["data"]["holders"][0]["pid"] == holder.pid
    suggested = found["PORT001"]["data"]["suggested_port"]
    assert suggested and suggested != port and not port_in_use(suggested)
    # The other rank reached a listener that is no store: it gives up, non-zero, well within --timeout.
    assert one.returncode != 0 and one.elapsed_s < 50, one.stdout + one.stderr
    assert "did not answer as a c10d store" in one.stdout, one.stdout


def test_second_job_on_the_same_port_gets_a_clear_error(tmp_path: Path) -> None:
    port = free_port()
    # The first job's rank 0 hosts its store and waits for a rank 1 that never comes.
    first = start_rank(0, 2, ["run", "--timeout", "60", "--skip", "probe", "--quiet"], port=port,
                       common_env={"PREFLIGHT_JOB_ID": "first"})
    try:
        deadline_ok = _wait_listening(port, 30)
        assert deadline_ok, "the first job never listened"
        runs = spawn_env_ranks(2, ["--timeout", "60", "--skip", "probe"], port=port,
                               common_env={"PREFLIGHT_JOB_ID": "second"}, timeout=120)
        assert runs[0].returncode == 3 and f"pid {first.pid}" in runs[0].stdout, runs[0].stdout
        assert runs[1].returncode != 0 and runs[1].elapsed_s < 50  # within --timeout (60 s)
        assert "belongs to another run" in runs[1].stdout and "env-first" in runs[1].stdout, runs[1].stdout
        assert "PORT004: cannot reach rank 0" in runs[1].stdout  # the line carries its id, as every finding does
    finally:
        first.kill()
        first.communicate(timeout=10)


def _wait_listening(port: int, timeout_s: float) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_in_use(port):
            return True
        time.sleep(0.1)
    return False


def _single(port: int, extra: dict | None = None, user: list[str] | None = None,
            tmp_path: Path | None = None) -> tuple[subprocess.CompletedProcess[str], dict]:
    report = Path(tmp_path or "/tmp", f"single-{port}.json")
    env = base_env({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                    **(extra or {})})
    done = subprocess.run([*(user or []), PYTHON, "-m", "preflight", "run", "--skip", "probe", "--json", str(report)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert report.exists(), done.stdout + done.stderr
    return done, read_json(report)


def test_master_port_in_ephemeral_range_warns(tmp_path: Path) -> None:
    low, high = ephemeral_range() or (32768, 60999)
    port = next(p for p in range(low + 1000, high) if not port_in_use(p))
    done, report = _single(port, tmp_path=tmp_path)
    assert [f["check_id"] for f in report["findings"]] == ["PORT002"], report["findings"]
    assert done.returncode == 0
    # An env:// run has no job id: the suggestion says what it was derived from, truthfully.
    assert "derived from this run's id" in report["findings"][0]["message"], report["findings"][0]["message"]
    assert "job id" not in report["findings"][0]["message"]


def test_clean_master_port_is_silent(tmp_path: Path) -> None:
    done, report = _single(free_port(), tmp_path=tmp_path)
    assert report["findings"] == [] and done.returncode == 0, report["findings"]


def test_privileged_port_as_non_root_is_an_error(tmp_path: Path) -> None:
    require(os.geteuid() == 0 and shutil.which("setpriv") is not None, "needs root and setpriv to drop to nobody")
    # pytest's tmp_path lies under a 0700 directory: nobody needs a folder it can reach.
    folder = Path(tempfile.mkdtemp(prefix="pf-port-"))
    try:
        folder.chmod(0o777)
        done, report = _single(80, tmp_path=folder, user=["setpriv", "--reuid=65534", "--regid=65534",
                                                          "--clear-groups"])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ids = {f["check_id"] for f in report["findings"]}
    assert "PORT003" in ids and done.returncode == 3, report["findings"]


def test_port_holder_command_line_is_redacted(tmp_path: Path) -> None:
    """PORT001 names the holder's command, never a password on it (issue 17: it printed it whole)."""
    port = free_port()
    secret_url, marker = "postgres://svc:pf3holder/pw@db.internal/x", "pf3holder/pw"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(port), "--db", secret_url, "--token", "pf3tokenflag"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        report = tmp_path / "r.json"
        runs = spawn_env_ranks(1, ["--timeout", "10", "--skip", "probe", "--json", str(report)], port=port,
                               common_env={"PREFLIGHT_JOB_ID": "4243"}, timeout=60)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    zero = runs[0]
    assert f"pid {holder.pid}" in zero.stdout, zero.stdout + zero.stderr
    everything = zero.stdout + zero.stderr + report.read_text()
    assert "--db <redacted>" in zero.stdout
    for secret in (marker, "pf3tokenflag"):
        assert secret not in everything


def test_port005_an_unauthenticated_run_over_more_than_one_host_is_an_info_finding() -> None:
    two_hosts = [rank_facts(0, "node01"), rank_facts(1, "node02")]
    [finding] = run("PORT005", two_hosts)
    assert finding.severity == Severity.INFO and "2 hosts" in finding.message and "PREFLIGHT_SECRET" in finding.hint
    assert run("PORT005", two_hosts, authenticated=True) == []  # every rank held the run secret
    assert run("PORT005", [rank_facts(0, "node01"), rank_facts(1, "node01")]) == []  # one host: loopback only
