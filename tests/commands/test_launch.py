"""`preflight launch` and torchrun: torch's own elastic launcher, real worker processes."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from preflight.reports.json import load as load_report
from tests.helpers.ranks import EXEC, base_env, free_port, launch_forkserver, launch_workers, plant_env, run_cli


def test_launch_four_ranks_passes(tmp_path) -> None:
    result = run_cli(["launch", "-n", "4", "--skip", "probe", "--json", str(tmp_path / "r.json")], timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED" in result.stdout
    report = load_report(tmp_path / "r.json")
    assert report.meta.launcher == "torchrun" and report.meta.world_size == 4
    assert [f.rank for f in report.ranks] == [0, 1, 2, 3]
    assert report.meta.authenticated  # launch hands every rank a per-run PREFLIGHT_SECRET
    # preflight launch defaults to OMP_NUM_THREADS=1 for its ranks.
    assert {f.env.get("OMP_NUM_THREADS") for f in report.ranks} == {"1"}


def test_launch_leaves_nothing_in_the_temporary_folder(tmp_path) -> None:
    """torch's elastic agent makes a log folder per launch (`torchelastic_*`: one per rank and attempt)
    and never removes it: a node that runs preflight before every job would collect thousands. Exec'd,
    not forked, so that TMPDIR is read afresh (a forked child keeps its zygote's tempfile.tempdir).
    A deep TMPDIR, as a batch system's per-job one can be: the forkserver's socket under it would not
    fit an AF_UNIX address (107 bytes), and the launch failed to start."""
    scratch = tmp_path / ("a-deep-per-job-temporary-folder" * 3)
    scratch.mkdir()
    result = subprocess.run([sys.executable, "-m", "preflight", "launch", "-n", "2", "--skip", "probe"],
                            env={**base_env(), "TMPDIR": str(scratch)}, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in scratch.iterdir()) == []


def test_a_variable_of_bytes_that_are_not_utf8_is_reported_escaped_and_agrees(tmp_path) -> None:
    """An environment value that is not UTF-8 (a Latin-1 job name, a binary variable): every rank
    failed to publish its facts (a UnicodeEncodeError traceback, exit 1); now it travels escaped, and
    rank 0 compares its own escaped value with the others' (no ENV004 for a variable all ranks share)."""
    env = {**base_env(), "PF_BINARY": os.fsdecode(b"caf\xe9 \xff")}
    result = subprocess.run([sys.executable, "-m", "preflight", "launch", "-n", "2", "--skip", "probe", "--json",
                             str(tmp_path / "r.json")], env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    assert [f.env.get("PF_BINARY") for f in report.ranks] == ["caf\\xe9 \\xff"] * 2
    assert not [f for f in report.findings if "PF_BINARY" in f.message], report.findings


def test_launch_reads_abbreviations_of_its_own_flags(tmp_path) -> None:
    """`--npr 2 --start exec` are launch's -n and --start-method, as argparse reads them: never passed
    on to `run` (which knew neither, and every rank exited 2)."""
    result = run_cli(["launch", "--npr", "2", "--start", "exec", "--skip", "probe", "--json",
                      str(tmp_path / "r.json"), "--quiet"], timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    assert report.meta.world_size == 2 and [f.rank for f in report.ranks] == [0, 1]
    assert "--npr" not in report.meta.command_line and "--start" not in report.meta.command_line


TWO_LAUNCHES = """
import os, sys
from preflight.commands.cli import main
os.environ["NCCL_DEBUG"] = "WARN"
first = main(["launch", "-n", "2", "--skip", "probe", "--json", "first.json", "--quiet"])
os.environ["NCCL_DEBUG"] = "INFO"
second = main(["launch", "-n", "2", "--skip", "probe", "--json", "second.json", "--quiet"])
sys.exit(10 * first + second)
"""


def test_forked_ranks_run_in_each_launchs_own_environment_and_folder(tmp_path) -> None:
    """The ranks fork from one forkserver per process, started with the first launch's environment:
    a second launch from the same process must still hand its ranks its own variables and folder."""
    done = subprocess.run([sys.executable, "-c", TWO_LAUNCHES], cwd=tmp_path, env=base_env(), capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    for name, value in (("first.json", "WARN"), ("second.json", "INFO")):
        report = load_report(tmp_path / name)  # a relative --json lands in the launch's folder
        assert [f.rank for f in report.ranks] == [0, 1]
        assert {f.env.get("NCCL_DEBUG") for f in report.ranks} == {value}, name

def test_launch_exits_3_naming_the_rank_with_async_error_handling_off(tmp_path) -> None:
    planted = plant_env(tmp_path, {3: 'os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"'})
    result = run_cli(["launch", "-n", "4", *EXEC, "--skip", "probe", "--json", str(tmp_path / "r.json")], planted,
                     timeout=180)
    assert result.returncode == 3, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    [finding] = [f for f in report.findings if f.check_id == "NCCL001"]
    assert finding.ranks == [3] and finding.hosts == [socket.gethostname()]
    assert "NCCL001" in result.stdout and "rank 3" in result.stdout


def test_torchrun_workers_resolve_and_join_the_agent_store(tmp_path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "preflight", "--skip", "probe", "--json", str(tmp_path / "r.json")]
    result = subprocess.run(command, env=base_env(), capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    assert report.meta.launcher == "torchrun" and report.meta.world_size == 2
    worlds = [facts.world for facts in report.ranks]
    assert all(w.use_agent_store for w in worlds)
    assert [w.local_rank for w in worlds] == [0, 1]
    assert worlds[1].raw["TORCHELASTIC_RUN_ID"] == worlds[0].raw["TORCHELASTIC_RUN_ID"]


NEVER_PUBLISHES = """
import time
from preflight.channel import exchange
exchange.Exchange.publish = lambda self, payload: time.sleep(300)
"""


def test_sigterm_to_launch_ends_in_exit_4_with_rank_0s_partial_report(tmp_path) -> None:
    """scancel or a Slurm time limit: one line, exit 4 (incomplete), rank 0's report written; no traceback."""
    # Rank 1 never reports: it hangs where it would publish its payload, inside the run. (A plant that
    # slept at start-up would hang before the rank's handlers exist, with the launch's block on the
    # signals still in force, and torchrun's agent would wait out its 30 s before SIGKILL.)
    planted = plant_env(tmp_path, {1: NEVER_PUBLISHES})
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "launch", "-n", "2", *EXEC, "--skip", "probe",
                             "--timeout", "120", "--json", str(tmp_path / "r.json")],
                            env=base_env(planted), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # rank 0's phase lines: wait until it is collecting
        seen.append(line)
        if "exchange done" in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    err = "".join(seen) + err
    assert proc.returncode == 4, out + err
    assert "Traceback" not in err and "stopped by SIGTERM" in err
    report = load_report(tmp_path / "r.json")
    assert report.exit_code == 4 and any(f.check_id == "RUN004" for f in report.findings)


def test_the_forkserver_outlives_a_sigterm_so_the_agent_still_sees_its_ranks(tmp_path) -> None:
    """scancel's SIGTERM reaches every process of the step, the forkserver too. It used to end there first,
    and the agent, which learns its ranks' exits through it, took them all for exited: the launcher removed
    its folder while rank 0 was still writing into it. Now it keeps SIGTERM blocked and leaves with the
    launch: sent to it alone, the run goes on to its verdict."""
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "launch", "-n", "2", "--ops", "all_reduce",
                             "--sizes", "4MiB", "--iters", "300", "--json", str(tmp_path / "r.json")],
                            env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # rank 0's phase lines: the probes start after the cross checks
        if "cross checks done" in line:
            break
    launch_forkserver(proc.pid).send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stdout + stderr
    report = load_report(tmp_path / "r.json")
    assert report.exit_code == 0 and not [f for f in report.findings if f.check_id == "RUN004"], report.findings


def test_under_plain_torchrun_a_failing_verdict_is_every_workers_exit_code(tmp_path) -> None:
    """torchrun's agent stops the other workers once one exits non-zero: none may end as -15 (SIGTERM)."""
    planted = plant_env(tmp_path, {1: 'os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"'})
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "preflight", "--skip", "probe", "--json", str(tmp_path / "r.json")]
    result = subprocess.run(command, env=base_env(planted), capture_output=True, text=True, timeout=180)
    assert load_report(tmp_path / "r.json").exit_code == 3
    codes = re.findall(r"exitcode\s*:\s*(-?\d+)", result.stderr)  # the agent's summary of failed workers
    assert codes and set(codes) == {"3"}, result.stderr[-3000:]
    # torch's agent exits 1 for a failed worker, whatever its code: the README's exit-code table says so.
    assert result.returncode == 1
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "| `torchrun ... -m preflight` | **1** for any verdict but 0" in readme


def test_two_torchrun_agents_on_one_host_are_two_nodes_with_a_warning(tmp_path) -> None:
    """`torchrun --nnodes 2 --node-rank 0/1` on one machine: no LAYOUT001/003, one LAYOUT005 warning."""
    port = free_port()
    agents = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
         "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
         "-m", "preflight", "--skip", "probe", "--json", str(tmp_path / f"r{node}.json")],
        env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for node in (0, 1)]
    outputs = [agent.communicate(timeout=180)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], "\n".join(outputs)[-4000:]
    [path] = [p for p in (tmp_path / "r0.json", tmp_path / "r1.json") if p.exists()]  # rank 0's agent
    report = load_report(path)
    assert report.meta.world_size == 4 and report.exit_code == 0
    assert [(f.host, f.world.node_rank, f.world.local_rank) for f in report.ranks] == [
        (socket.gethostname(), node, local) for node in (0, 1) for local in (0, 1)]
    ids = [f.check_id for f in report.findings if f.severity.value != "ok"]
    assert not [i for i in ids if i in ("LAYOUT001", "LAYOUT002", "LAYOUT003", "LAYOUT004")], ids
    [shared] = [f for f in report.findings if f.check_id == "LAYOUT005"]
    assert shared.severity.value == "warn" and shared.hosts == [socket.gethostname()]
    assert "share the host name" in shared.message and "on one machine" in shared.message


def test_a_rank_killed_mid_probe_under_launch_is_named_dead_not_the_ranks_stopped_after_it(tmp_path) -> None:
    """The OOM killer's way: SIGKILL from outside to one forked worker while the probes run. The agent
    stops every rank once one dies: the launcher names the dead one, with its signal and pid."""
    proc = subprocess.Popen([sys.executable, "-m", "preflight", "launch", "-n", "4", "--ops", "all_reduce",
                             "--sizes", "4MiB", "--iters", "5000", "--probe-timeout", "120",
                             "--json", str(tmp_path / "r.json"), "--text", str(tmp_path / "r.txt")],
                            env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # rank 0's phase lines: the probes start after the cross checks
        if "cross checks done" in line:
            break
    workers = launch_workers(proc.pid)
    assert len(workers) == 4
    victim = workers[-1].pid  # forked last: not rank 0, which must live to write the report
    os.kill(victim, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 3, stdout + stderr
    report = load_report(tmp_path / "r.json")
    [dead] = [f for f in report.findings if f.check_id == "RUN008"]
    assert "SIGKILL" in dead.message and f"(pid {victim})" in dead.message and len(dead.ranks) == 1
    assert f"rank {dead.ranks[0]} died: killed by SIGKILL (pid {victim})" in stderr
    assert report.exit_code == 3 and report.missing_ranks in ([], dead.ranks)
    assert not [f for f in report.findings if f.check_id in ("RANK001", "BW002") and set(f.ranks) - set(dead.ranks)]
    assert "RUN008" in (tmp_path / "r.txt").read_text()  # every file the user asked for is amended


def test_a_rank_killed_during_the_exchange_under_launch_is_named_and_the_stopped_ranks_are_not_missing(
        tmp_path) -> None:
    """With `--json -` (`| jq`): stdout holds the amended report alone, once; the text file is amended too."""
    from preflight.reports.json import loads
    from tests.channel.test_leaving import KILLED_IN_EXCHANGE  # the one plant of this fault

    planted = plant_env(tmp_path, {2: KILLED_IN_EXCHANGE})
    result = run_cli(["launch", "-n", "4", *EXEC, "--skip", "probe", "--timeout", "60",
                      "--json", "-", "--text", str(tmp_path / "r.txt")], env=planted, timeout=240)
    assert result.returncode == 3, result.stdout + result.stderr
    report = loads(result.stdout)  # BadPayload (the test fails) when stdout holds anything but one report
    assert [f.ranks for f in report.findings if f.check_id == "RUN008"] == [[2]], result.stderr
    assert not [f for f in report.findings if f.check_id == "RANK001"] and report.missing_ranks in ([], [2])
    assert report.exit_code == 3 and "preflight launch: verdict failed" in result.stderr.lower()
    assert "RUN008" in (tmp_path / "r.txt").read_text()


def test_rendezvous_events_keep_their_names_without_walking_the_stack(monkeypatch) -> None:
    """The launcher's cheap get_method_name names the same function torch's inspect.stack() did."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    from preflight.commands.launch import _cheap_rendezvous_event_names

    original = dynamic_rendezvous.get_method_name
    monkeypatch.setattr(dynamic_rendezvous, "get_method_name", original)  # restored after the test

    def _record(namer):  # torch's shape: Handler.some_step -> self._record -> get_method_name()
        return namer()

    def some_step(namer):
        return _record(namer)

    expected = some_step(original)
    _cheap_rendezvous_event_names()
    assert dynamic_rendezvous.get_method_name is not original
    assert some_step(dynamic_rendezvous.get_method_name) == expected == "some_step"
    assert dynamic_rendezvous.get_method_name(depth=10_000) == "no_method_name"
