"""The storage family with real env:// ranks on this machine: a rank in its own mount namespace with a
private directory over PATH, a corrupted read-back, a filesystem too small, SIGTERM mid-family.

Faults are planted from the test side only: a fake host's mount namespace and bind mount
(tests/helpers/hosts.py, with this machine's own hostname: one host, one rank apart), a tmpfs of a
given size, and plant_env's sitecustomize (which changes the file on disk after its writer's fsync,
before the reader reads it; and holds one rank's statvfs of PATH so rank 0 is caught mid-family).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.hosts import fake_host
from tests.helpers.ranks import Placement, free_port, plant_env, read_json, spawn_env_ranks, start_rank
from tests.helpers.tools import require_root

FAST = ["--skip", "probe,network", "--timeout", "60"]
RUNS = int(os.environ.get("PREFLIGHT_STORAGE_RUNS", "1"))  # "10 of 10" (issue 33): PREFLIGHT_STORAGE_RUNS=10


def _storage(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["check_id"].startswith("STO")]


def _left(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_a_healthy_path_has_no_finding_figures_and_nothing_left(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    runs = spawn_env_ranks(2, [*FAST, "--storage", str(ckpt), "--checkpoint-size", "8M", "--storage-budget", "1M",
                               "--json", str(tmp_path / "r.json")], timeout=240)
    assert [r.returncode for r in runs.values()] == [0, 0], runs[0].stdout + runs[0].stderr
    report = read_json(tmp_path / "r.json")
    assert _storage(report) == []
    section = report["storage"]
    [host] = section["hosts"]
    assert host["ranks"] == [0, 1] and host["sees"] and host["write_gbps"] > 0 and host["read_gbps"] > 0
    assert section["share_bytes"] == 2**20 and section["save_s"] > 0 and section["restore_s"] > 0
    assert {c["check_id"]: c["status"] for c in report["checks"] if c["check_id"].startswith("STO")} == {
        f"STO00{i}": "ok" for i in range(1, 10)}
    assert _left(ckpt) == []


@pytest.mark.timeout(300 * RUNS)  # does-not-hang bound: RUNS runs of 4 ranks on 2 shared cores
def test_a_rank_with_a_private_directory_over_path_is_named_alone(tmp_path: Path) -> None:
    """4 ranks on this host; rank 2 in its own mount namespace with a private directory bound over PATH."""
    ckpt, private = tmp_path / "ckpt", tmp_path / "private"
    ckpt.mkdir()
    private.mkdir()
    apart = fake_host(tmp_path, socket.gethostname(), binds={private: ckpt})
    for attempt in range(RUNS):
        out = tmp_path / f"r{attempt}.json"
        runs = spawn_env_ranks(4, [*FAST, "--storage", str(ckpt), "--storage-budget", "1M", "--json", str(out)],
                               place={2: Placement(apart)}, timeout=300)
        assert {r.returncode for r in runs.values()} == {3}, runs[0].stdout + runs[0].stderr
        [finding] = _storage(read_json(out))
        assert finding["check_id"] == "STO001" and finding["ranks"] == [2] and finding["severity"] == "error"
        assert f"[{private}]" in finding["message"]  # what PATH is there: the private directory's bind mount
        assert _left(ckpt) == [] and _left(private) == []


def test_a_corrupted_read_back_names_the_path_and_the_host(tmp_path: Path) -> None:
    """Rank 1's file gets one byte flipped on disk right after its fsync: rank 0 reads it back."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    flip = """
        import os as _os
        _fsync = _os.fsync
        def _flip_after_fsync(fd):
            _fsync(fd)
            name = _os.readlink(f"/proc/self/fd/{fd}")
            if ".preflight-storage-" in name and _os.path.basename(name).startswith("r"):
                with open(name, "r+b") as handle:
                    first = handle.read(1)
                    handle.seek(0)
                    handle.write(bytes([first[0] ^ 0xFF]))
        _os.fsync = _flip_after_fsync
    """
    runs = spawn_env_ranks(2, [*FAST, "--storage", str(ckpt), "--storage-budget", "1M",
                               "--json", str(tmp_path / "r.json")],
                           common_env=plant_env(tmp_path, {1: flip}), timeout=240)
    assert {r.returncode for r in runs.values()} == {3}, runs[0].stdout + runs[0].stderr
    report = read_json(tmp_path / "r.json")
    [finding] = _storage(report)
    assert finding["check_id"] == "STO006" and finding["hosts"] == [socket.gethostname()]
    assert f"{ckpt}/.preflight-storage-" in finding["message"] and "/r1.p0" in finding["message"]
    assert finding["data"]["reader_rank"] == 0 and finding["data"]["writer_rank"] == 1
    assert _left(ckpt) == []


def test_free_space_below_the_checkpoint_is_an_error(tmp_path: Path) -> None:
    """A 4 MiB tmpfs as the checkpoint path, a 1 GiB checkpoint."""
    require_root()
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], check=True, timeout=30)
    try:
        runs = spawn_env_ranks(2, [*FAST, "--storage", str(small), "--checkpoint-size", "1G",
                                   "--storage-budget", "256K", "--json", str(tmp_path / "r.json")], timeout=240)
        assert {r.returncode for r in runs.values()} == {3}, runs[0].stdout + runs[0].stderr
        report = read_json(tmp_path / "r.json")
        [finding] = _storage(report)
        assert finding["check_id"] == "STO004" and finding["severity"] == "error"
        assert "less than one checkpoint" in finding["message"] and finding["data"]["needed"] == 2**30
        assert finding["data"]["free"] <= 4 * 2**20
        assert _left(small) == []
    finally:
        subprocess.run(["umount", str(small)], check=False, timeout=30)


def test_sigterm_mid_family_removes_the_run_directory_and_spares_a_stale_one(tmp_path: Path) -> None:
    """Rank 1's statvfs of PATH is held, so rank 0 waits inside the family; SIGTERM it there."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    stale = ckpt / ".preflight-storage-stale0000"
    stale.mkdir()
    (stale / "nonce").write_text("stale0000\n")
    hold = f"""
        import os as _os, time as _time
        _statvfs = _os.statvfs
        def _held(path):
            if str(path).startswith({str(ckpt)!r}):
                _time.sleep(120)
            return _statvfs(path)
        _os.statvfs = _held
    """
    port = free_port()
    env = plant_env(tmp_path, {1: hold})
    args = ["run", *FAST, "--storage", str(ckpt), "--storage-budget", "1M", "--json", str(tmp_path / "r.json")]
    procs = [start_rank(r, 2, args, common_env=env, port=port) for r in range(2)]
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(_left(ckpt)) < 2:
            time.sleep(0.1)
        assert len(_left(ckpt)) == 2, "rank 0 never made its run directory"
        procs[0].send_signal(signal.SIGTERM)
        procs[0].communicate(timeout=120)
        assert procs[0].returncode == 4
        assert _left(ckpt) == [stale.name] and (stale / "nonce").read_text() == "stale0000\n"
        assert "RUN004" in {f["check_id"] for f in read_json(tmp_path / "r.json")["findings"]}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=30)


def test_the_family_is_off_without_a_path(tmp_path: Path) -> None:
    runs = spawn_env_ranks(1, [*FAST, "--json", str(tmp_path / "r.json")], timeout=120)
    assert runs[0].returncode == 0
    report = read_json(tmp_path / "r.json")
    storage_checks = [c for c in report["checks"] if c["check_id"].startswith("STO")]
    assert report["storage"] is None and storage_checks  # listed every run (JUnit's set is stable) ...
    assert all(c["status"] == "skipped" and c["reason"] == "no --storage" for c in storage_checks)  # ... never run
