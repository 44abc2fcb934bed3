"""The zygote that forks env:// ranks (tests/helpers/zygote.py) hands back real, separate processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from preflight.lib.waiting import wait_until
from tests.helpers import ranks
from tests.helpers.hosts import fake_host
from tests.helpers.tools import require_root
from tests.helpers.zygote import ZygoteRank, forkable, zygote

pytestmark = pytest.mark.skipif(not ranks.FORK_RANKS, reason="PREFLIGHT_TEST_EXEC_RANKS=1: every rank is exec'd")


def test_only_a_plain_preflight_rank_in_the_zygotes_start_environment_is_forked() -> None:
    argv = [sys.executable, "-m", "preflight", "run"]
    env = {"PATH": "/bin", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    assert forkable(argv, {**env, "RANK": "3", "NCCL_DEBUG": "INFO"}, env)
    assert forkable(argv, {**env, "PYTHONPATH": "/plants"}, env)  # a plant's sitecustomize: run in the child
    assert forkable(argv, {**env, "PYTHONPATH": "/plants:/ours"}, {**env, "PYTHONPATH": "/ours"})
    assert not forkable(argv, {**env, "PYTHONPATH": "/plants"}, {**env, "PYTHONPATH": "/ours"})  # /ours taken away
    assert not forkable(argv, {**env, "PYTHONHASHSEED": "7"}, env)
    assert not forkable(argv, {**env, "OMP_NUM_THREADS": "4"}, env)
    assert not forkable(argv, {**env, "LD_PRELOAD": "/x.so"}, env)
    assert not forkable([sys.executable, "train.py"], env, env)  # no such file: left to the interpreter
    assert forkable([sys.executable, __file__, "x"], env, env)  # a script: run_path'd in the child
    assert not forkable([sys.executable, "-m", "torch.distributed.run", __file__], env, env)
    assert not forkable(["taskset", "-c", "1", *argv], env, env)


def test_a_forked_rank_is_its_own_process_with_its_own_exit_code_and_output() -> None:
    proc = ranks.start_rank(0, 1, ["run", "--mesh", "nonsense"], port=ranks.free_port())
    assert isinstance(proc, ZygoteRank)
    assert psutil.Process(proc.pid).ppid() != psutil.Process().pid  # the zygote's child, not ours
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (out, err)
    assert "nonsense" in out + err and "Traceback" not in out + err


def test_a_forked_rank_can_be_signalled_and_waited_for_with_a_timeout() -> None:
    # World 2 with only rank 0 started: it waits for rank 1 until its --timeout.
    proc = ranks.start_rank(0, 2, ["run", "--skip", "probe", "--timeout", "600"], port=ranks.free_port())
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=1)
    assert proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    proc.communicate(timeout=60)


SCRIPT = """
import atexit, json, sys
atexit.register(lambda: print("atexit ran", flush=True))
print(json.dumps({"name": __name__, "argv": sys.argv, "path": sys.path, "file": __file__}), flush=True)
sys.exit(int(sys.argv[1]))
"""


def test_a_forked_script_sees_what_the_same_script_exec_d_sees(tmp_path) -> None:
    script = tmp_path / "bin" / "train.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    env = ranks.plant_env(tmp_path, {})  # PYTHONPATH with an entry in front: after the script's folder
    runs = {}
    for fresh in (False, True):
        proc = ranks.start_rank(0, 1, ["5", "--flag"], port=ranks.free_port(), common_env=env,
                                program=[str(script)], fresh=fresh)
        assert isinstance(proc, ZygoteRank) != fresh
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 5 and out.endswith("atexit ran\n"), (out, err)
        runs[fresh] = out.splitlines()[0]
    assert runs[False] == runs[True]
    assert f'"path": ["{script.parent}", ' in runs[False] and '"name": "__main__"' in runs[False], runs


# Run as sitecustomize: preflight must not be loaded yet (it is imported after the plant, as in an
# exec'd rank), and what the plant replaces is what the run then calls.
PLANT = """
import sys
print("plant ran; preflight loaded before it:", "preflight.commands.cli" in sys.modules, flush=True)
from preflight.commands import cli
cli.main = lambda *args, **kwargs: print("the planted main ran") or 7
"""


def test_a_planted_rank_is_forked_and_runs_its_plant_before_preflight_is_imported(tmp_path) -> None:
    env = ranks.plant_env(tmp_path, {0: PLANT})
    proc = ranks.start_rank(0, 1, ["run"], port=ranks.free_port(), common_env=env)
    assert isinstance(proc, ZygoteRank)
    out, err = proc.communicate(timeout=120)
    assert "plant ran; preflight loaded before it: False" in out, (out, err)
    assert "the planted main ran" in out and proc.returncode == 7, (out, err)
    # Rank 1 of the same run has no plant: the sitecustomize runs and does nothing; preflight runs as ever.
    other = ranks.start_rank(1, 2, ["--version"], port=ranks.free_port(), common_env=env)
    out, err = other.communicate(timeout=120)
    assert isinstance(other, ZygoteRank) and other.returncode == 0 and "plant ran" not in out, (out, err)


def test_a_plant_that_raises_is_one_line_and_the_rank_goes_on_as_an_interpreter_would(tmp_path) -> None:
    env = ranks.plant_env(tmp_path, {0: "raise ValueError('bad plant')"})
    proc = ranks.start_rank(0, 1, ["--version"], port=ranks.free_port(), common_env=env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Error in sitecustomize" in err and "ValueError: bad plant" in err, (out, err)


def test_a_rank_asked_to_be_fresh_is_an_interpreter_of_its_own() -> None:
    proc = ranks.start_rank(0, 1, ["--version"], port=ranks.free_port(), fresh=True)
    assert not isinstance(proc, ZygoteRank)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out.strip()


def test_a_rank_with_an_environment_larger_than_a_socket_message_is_forked_with_all_of_it(tmp_path) -> None:
    big = "q" * 300_000  # the zygote's request travels as a file, not as one socket message
    proc = ranks.start_rank(0, 1, ["run", "--skip", "probe", "--json", str(tmp_path / "r.json")],
                            port=ranks.free_port(), common_env={"BIG_BLOB": big})
    assert isinstance(proc, ZygoteRank)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, (out[-2000:], err[-2000:])
    assert (tmp_path / "r.json").exists()


def test_ranks_on_a_fake_host_are_forked_and_enter_its_namespaces_cgroup_and_limits(tmp_path) -> None:
    require_root()  # entering a mount namespace; elsewhere a fake host's ranks are exec'd on it
    host = fake_host(tmp_path, "pfz-host", memlock_kib=1024)
    port = ranks.free_port()
    procs = [ranks.start_rank(rank, 2, ["run", "--skip", "probe", "--timeout", "120", "--json",
                                        str(tmp_path / f"r{rank}.json")],
                              placement=ranks.Placement(host), port=port) for rank in range(2)]
    assert all(isinstance(proc, ZygoteRank) for proc in procs)
    assert {psutil.Process(proc.pid).ppid() for proc in procs} == {zygote(ranks.base_env()).process.pid}
    anchor = host.entry()["anchor"]
    runs = ranks.wait_for_ranks(dict(enumerate(procs)), time.monotonic(), timeout=240)
    assert [run.returncode for run in runs.values()] == [0, 0], [run.stdout[-1500:] for run in runs.values()]
    report = ranks.read_json(tmp_path / "r0.json")
    assert [h["host"] for h in report["host_ranking"]["hosts"]] == ["pfz-host"]  # its UTS namespace
    # The host's set-up changed (another memlock): the next rank enters an anchor started anew there.
    host.memlock_kib = 2048
    again = ranks.start_rank(0, 1, ["--version"], placement=ranks.Placement(host), port=ranks.free_port())
    again.communicate(timeout=120)
    assert host.entry()["anchor"] != anchor
    # Killed with the host: the anchor and the ranks, whose end is still seen.
    straggler = ranks.start_rank(0, 2, ["run", "--skip", "probe", "--timeout", "600"],
                                 placement=ranks.Placement(host), port=ranks.free_port())
    # While it waits for rank 1: the anchor's namespaces (one set for the host's processes), not this
    # machine's, and the host's memlock limit (the child enters them right after its fork).
    anchor = host.entry()["anchor"]
    wanted = {ns: os.readlink(f"/proc/{anchor}/ns/{ns}") for ns in ("net", "uts", "mnt")}
    entered = wait_until(lambda: {ns: os.readlink(f"/proc/{straggler.pid}/ns/{ns}") for ns in wanted} == wanted,
                         120, stop_if=lambda: straggler.poll() is not None)  # a does-not-hang bound
    assert entered, "the rank never entered the host"
    assert wanted["mnt"] != os.readlink("/proc/self/ns/mnt") and wanted["uts"] != os.readlink("/proc/self/ns/uts")
    assert psutil.Process(straggler.pid).rlimit(psutil.RLIMIT_MEMLOCK) == (2048 * 1024, 2048 * 1024)
    host.kill_started()
    assert straggler.wait(timeout=60) == -signal.SIGKILL


def test_the_cli_of_run_cli_is_forked_in_the_folder_asked_for(tmp_path, monkeypatch) -> None:
    forked: list[ZygoteRank] = []
    real = ranks.ZygoteRank

    def recording(*args, **kwargs) -> ZygoteRank:
        forked.append(real(*args, **kwargs))
        return forked[-1]

    monkeypatch.setattr(ranks, "ZygoteRank", recording)
    done = ranks.run_cli(["run", "--skip", "probe", "--json", "here.json"], cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(forked) == 1 and (tmp_path / "here.json").exists()  # the relative path, in cwd
    with pytest.raises(subprocess.TimeoutExpired):  # subprocess.run's contract: killed, then raised
        ranks.run_cli(["run", "--skip", "probe", "--timeout", "600"], timeout=3, env={  # waits for rank 1
            "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ranks.free_port())})
    assert forked[-1].poll() == -signal.SIGKILL


def test_a_reused_pid_gets_its_own_exit_code_not_an_earlier_childs() -> None:
    # pid_max is 32,768 here and a CI run forks thousands of ranks: the kernel reuses pids. Every pid
    # is made to look like an earlier child that exited 0; the new rank exits 2, and that is what shows.
    born = zygote(ranks.base_env())
    limit = int(Path("/proc/sys/kernel/pid_max").read_text())
    before = dict(born._exits)
    born._exits.update(dict.fromkeys(range(1, limit + 1), 0))
    try:
        proc = ranks.start_rank(0, 1, ["run", "--mesh", "nonsense"], port=ranks.free_port())
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (out, err)
    finally:
        born._exits.clear()
        born._exits.update(before)
