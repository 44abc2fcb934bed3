"""preflight under a real Slurm: srun tasks resolve their world, the verdict is srun's exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.reports.json import load as load_report
from tests.helpers.slurm import SlurmCluster

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
BIN = os.path.dirname(sys.executable)


def srun(cluster: SlurmCluster, args: list[str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = cluster.env({"PATH": f"{BIN}:{os.environ['PATH']}"})
    return subprocess.run(["srun", *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_srun_two_nodes_four_tasks_passes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    result = srun(slurm_cluster, ["-N", "2", "--ntasks-per-node=2", "preflight", "--skip", "probe",
                                  "--json", str(tmp_path / "r.json")])
    assert result.returncode == 0, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    assert report.meta.launcher == "slurm" and report.meta.world_size == 4 and report.meta.num_nodes == 2
    assert report.meta.job_id
    # Hosts are Slurm's node names (SLURMD_NODENAME), the names sbatch --exclude takes.
    assert [f.host for f in report.ranks] == ["node1", "node1", "node2", "node2"]
    assert [f.world.local_rank for f in report.ranks] == [0, 1, 0, 1]
    # The layout is derived on rank 0 from its own variables; no other rank ships it (O(1) payloads).
    assert report.ranks[0].world.expected_hosts == {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    assert report.ranks[3].world.expected_hosts == {}
    assert report.ranks[0].world.raw["SLURM_PROCID"] == "0"


def test_srun_task_that_never_starts_is_named_with_its_node(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    # --timeout 20, not 6: every task is a fresh interpreter importing torch, and under the suite's load
    # rank 0's store came up more than 6 s after rank 2 began to wait for it (rank 2: "cannot reach rank 0").
    script = (f'if [ "$SLURM_PROCID" = 3 ]; then exit 0; fi; '
              f'exec preflight --skip probe --timeout 20 --json {tmp_path}/r.json')
    result = srun(slurm_cluster, ["-N", "2", "--ntasks-per-node=2", "sh", "-c", script])
    assert result.returncode == 3, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    [missing] = [f for f in report.findings if f.check_id == "RANK001"]
    assert missing.ranks == [3] and missing.hosts == ["node2"]
    assert report.bad_hosts == ["node2"]


def test_scancel_signal_term_mid_probes_ends_every_task_with_exit_4_and_rank_0s_partial_report(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """`scancel --signal=TERM`: Slurm's slurmd signals every task (a time limit's SIGTERM is the
    same; a SIGTERM to srun itself cancels the step, SIGKILL after KillWait): each task ends at
    once, exit 4, rank 0 writes its partial report; no traceback (issue 36, items 1-2)."""
    import signal
    import threading
    import time

    env = slurm_cluster.env({"PATH": f"{BIN}:{os.environ['PATH']}"})
    proc = subprocess.Popen(["srun", "-N", "2", "--ntasks-per-node=1", "preflight", "--ops", "all_reduce",
                             "--sizes", "16MiB", "--iters", "5000", "--probe-timeout", "120",
                             "--json", str(tmp_path / "r.json")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and proc.stdout is not None
    seen: list[str] = []
    for line in proc.stderr:  # rank 0's progress lines: the probes start after the cross checks
        seen.append(line)
        if "cross checks done" in line:
            break
    time.sleep(3.0)  # inside the all_reduce loop (5000 iterations of 16 MiB: far longer)
    rest: list[str] = []
    threading.Thread(target=lambda: rest.append(proc.stderr.read()), daemon=True).start()  # type: ignore[union-attr]
    [job] = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout.split()
    subprocess.run(["scancel", f"--signal={signal.SIGTERM.name[3:]}", job], env=env, check=True)
    out, _ = proc.communicate(timeout=60)  # "does not hang": 2 s on an idle machine
    time.sleep(0.5)
    err = "".join(seen + rest)
    assert proc.returncode == 4, out + err
    assert "Traceback" not in err, err
    report = load_report(tmp_path / "r.json")
    assert report.exit_code == 4 and any(f.check_id == "RUN004" for f in report.findings)



def test_preflight_in_the_batch_script_outside_srun_says_run_it_under_srun(slurm_cluster: SlurmCluster,
                                                                           tmp_path: Path) -> None:
    """Slurm's batch step is one process of the job's tasks: one line, exit 2, no host blamed (issue 45)."""
    env = slurm_cluster.env({"PATH": f"{BIN}:{os.environ['PATH']}"})
    out = tmp_path / "batch.out"
    script = f"preflight --skip probe --timeout 10 --json {tmp_path}/r.json; echo exit=$?"
    done = subprocess.run(["sbatch", "--wait", "-n", "3", "-o", str(out), "--wrap", script], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = out.read_text().splitlines()
    assert lines[-1] == "exit=2", lines
    [said] = lines[:-1]
    assert said.startswith("preflight: error: run preflight under srun (this is the batch script's own step)"), said
    assert not (tmp_path / "r.json").exists()  # nothing ran, nothing blamed
