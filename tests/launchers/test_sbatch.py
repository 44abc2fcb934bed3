"""The sbatch scripts on a real Slurm over 4 network-namespace hosts (own hostname, /etc/hosts,
ib0): the standalone preflight job, and preflight then training with the exclude-and-resubmit
flow. Each test is one or two real batch jobs; nothing overrides MASTER_ADDR (the first host's
name resolves on every host).

A node's fault is planted the way a broken node has it: a variable only that node's
environment sets (NCCL_SOCKET_IFNAME naming no interface), through a PREFLIGHT wrapper that
exports it when SLURMD_NODENAME is the chosen node. An attack on the store is planted the same
way: on one node the wrapper runs a foreign store client without the job's secret
(tests/helpers/store_forger.py) in place of that node's rank.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from preflight.reports.json import load as load_report
from tests.helpers.slurm import SlurmCluster

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "sbatch"
BIN = os.path.dirname(sys.executable)


def _env(cluster: SlurmCluster, tmp_path: Path, **extra: str) -> dict[str, str]:
    return cluster.env({"PATH": f"{BIN}:{os.environ['PATH']}", "PREFLIGHT_DIR": str(tmp_path),
                        "PREFLIGHT_ARGS": "--skip probe", **extra})


def _faulty(tmp_path: Path, *nodes: str) -> str:
    """A PREFLIGHT command that runs preflight with NCCL_SOCKET_IFNAME=nosuch0 on `nodes` only."""
    wrapper = tmp_path / "faulty-preflight"
    tests = " || ".join(f'[ "$SLURMD_NODENAME" = {node} ]' for node in nodes)
    wrapper.write_text(f"#!/bin/sh\nif {tests}; then export NCCL_SOCKET_IFNAME=nosuch0; fi\n"
                       f'exec {BIN}/preflight "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def _forging(tmp_path: Path, forger_node: str, innocent: str) -> str:
    """A PREFLIGHT command: on `forger_node` a foreign store client that forges the verdict and its
    rank's payload (blaming `innocent`), elsewhere preflight, whose exit code lands in exit-<node>."""
    wrapper = tmp_path / "forging-preflight"
    wrapper.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$SLURMD_NODENAME" = {forger_node} ]; then
          PYTHONPATH={ROOT} exec {sys.executable} {ROOT}/tests/helpers/store_forger.py "$SLURM_PROCID" {innocent}
        fi
        {BIN}/preflight "$@"
        rc=$?
        echo "$rc" > {tmp_path}/exit-"$SLURMD_NODENAME"
        exit "$rc"
        """))
    wrapper.chmod(0o755)
    return str(wrapper)


def _output(tmp_path: Path, name: str, job_id: str) -> str:
    return (tmp_path / f"{name}-{job_id}.out").read_text()


def _queue(cluster: SlurmCluster) -> list[str]:
    return subprocess.run(cluster.command(["squeue", "-h", "-o", "%i"]), env=cluster.env(), capture_output=True,
                          text=True, timeout=30).stdout.split()


def test_preflight_job_writes_every_report_and_names_the_bad_node(slurm_netns: SlurmCluster,
                                                                  tmp_path: Path) -> None:
    n1, n2, n3 = slurm_netns.node_names[:3]
    env = _env(slurm_netns, tmp_path, PREFLIGHT=_faulty(tmp_path, n2), NCCL_DEBUG="INFO",
               PREFLIGHT_TIMEOUT="40")
    job, state = slurm_netns.sbatch(SBATCH / "preflight.sbatch", ["-N", "3", "--ntasks-per-node=1"], [], env,
                                      cwd=tmp_path)
    out = _output(tmp_path, "preflight", job)
    assert "ExitCode=3:0" in state, state + out
    folder = tmp_path / f"preflight-{job}"
    assert {p.name for p in folder.iterdir()} >= {"report.html", "report.json", "junit.xml", "bad-nodes.txt"}
    assert (folder / "bad-nodes.txt").read_text() == f"{n2}\n"
    assert f"bad nodes: {n2}" in out
    report = load_report(folder / "report.json")
    # MASTER_PORT from the job id; communication defaults only where the user set none.
    assert report.meta.master_port == 12000 + int(job) % 20000 and report.meta.master_addr == n1
    assert [f.host for f in report.ranks] == [n1, n2, n3]
    assert {f.env.get("NCCL_DEBUG") for f in report.ranks} == {"INFO"}
    assert {f.env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING") for f in report.ranks} == {"1"}
    assert [f.check_id for f in report.findings if f.severity.value == "error"] == ["NCCL008"]


def test_a_sbatch_run_is_authenticated_and_refuses_a_forged_verdict_and_payload(slurm_netns: SlurmCluster,
                                                                                 tmp_path: Path) -> None:
    """The script gives the job a secret of its own (the user set none): a foreign client on n3 that
    reaches MASTER_PORT forges the verdict (exit 0) and rank 2's payload blaming n2. Refused: the
    payload is RUN002, n2 is on no exclude list, and rank 1 on n2 ends with rank 0's code, 3."""
    n1, n2, n3 = slurm_netns.node_names[:3]
    env = _env(slurm_netns, tmp_path, PREFLIGHT=_forging(tmp_path, n3, innocent=n2), PREFLIGHT_TIMEOUT="30")
    assert "PREFLIGHT_SECRET" not in env
    job, state = slurm_netns.sbatch(SBATCH / "preflight.sbatch", ["-N", "3", "--ntasks-per-node=1"], [], env,
                                      cwd=tmp_path)
    out = _output(tmp_path, "preflight", job)
    assert "ExitCode=3:0" in state, state + out
    assert "forger: verdict and rank 2's payload forged" in out, out  # the attack really ran
    report = load_report(tmp_path / f"preflight-{job}" / "report.json")
    assert report.meta.authenticated
    [refused] = [f for f in report.findings if f.check_id == "RUN002"]
    assert refused.ranks == [2] and "PREFLIGHT_SECRET" in refused.message
    assert not [f for f in report.findings if f.check_id in ("NCCL008", "PORT005")], report.findings
    assert n2 not in report.bad_hosts and n2 not in (tmp_path / f"preflight-{job}" / "bad-nodes.txt").read_text()
    assert [f.host for f in report.ranks] == [n1, n2]
    assert (tmp_path / f"exit-{n2}").read_text().strip() == "3"  # the forged exit 0 was not adopted
    assert (tmp_path / f"exit-{n1}").read_text().strip() == "3"


def test_one_task_per_node_runs_torchrun_for_preflight_and_training(slurm_netns: SlurmCluster,
                                                                     tmp_path: Path) -> None:
    train = tmp_path / "train.py"
    train.write_text("import os, pathlib\n"
                     f"pathlib.Path({str(tmp_path)!r}, 'trained-' + os.environ['RANK']).write_text("
                     "os.environ['SLURMD_NODENAME'])\n")
    env = _env(slurm_netns, tmp_path, PREFLIGHT_TASKS="node", PREFLIGHT_GPUS_PER_NODE="2")
    job, state = slurm_netns.sbatch(SBATCH / "train-with-preflight.sbatch", ["-N", "2", "--ntasks-per-node=1"],
                                      [str(train)], env, cwd=tmp_path)
    assert "ExitCode=0:0" in state, state + _output(tmp_path, "preflight-train", job)
    report = load_report(tmp_path / f"preflight-{job}" / "report.json")
    assert report.meta.launcher == "torchrun" and report.meta.world_size == 4
    n1, n2 = slurm_netns.node_names[:2]
    assert sorted({f.host for f in report.ranks}) == [n1, n2]
    assert sorted(p.read_text() for p in tmp_path.glob("trained-*")) == [n1, n1, n2, n2]


def test_a_bad_node_is_excluded_by_the_resubmitted_job_which_trains(slurm_netns: SlurmCluster,
                                                                    tmp_path: Path) -> None:
    marker = tmp_path / "trained"
    # The first host is the bad one: the resubmitted job must not inherit MASTER_ADDR from it.
    n1 = slurm_netns.node_names[0]
    env = _env(slurm_netns, tmp_path, PREFLIGHT=_faulty(tmp_path, n1), PREFLIGHT_RESUBMIT="2")
    first, state = slurm_netns.sbatch(SBATCH / "train-with-preflight.sbatch", ["-N", "2", "--ntasks-per-node=1"],
                                        ["touch", str(marker)], env, cwd=tmp_path)
    out = _output(tmp_path, "preflight-train", first)
    assert "ExitCode=3:0" in state and not marker.exists(), state + out
    match = re.search(r"resubmitted as job (\d+) \(resubmission 1 of 2\), excluding " + n1, out)
    assert match, out
    second = match.group(1)
    state = slurm_netns.wait(second)
    out2 = _output(tmp_path, "preflight-train", second)
    assert "ExitCode=0:0" in state and f"ExcNodeList={n1}" in state, state + out2
    assert "resubmission 1" in out2 and marker.exists()
    report = load_report(tmp_path / f"preflight-{second}" / "report.json")
    # Which two of the good nodes Slurm gives the new job depends on when the first job's nodes are
    # released (it is submitted from inside that job): two nodes, the bad one not among them.
    hosts = sorted({f.host for f in report.ranks})
    assert len(hosts) == 2 and n1 not in hosts and report.exit_code == 0, hosts
    # Its own first host is the rendezvous, not the bad node's address inherited from the first job.
    assert report.meta.master_addr == hosts[0] and report.meta.master_port == 12000 + int(second) % 20000


@pytest.mark.parametrize(("case", "nodes", "extra", "says"), [
    ("counter used up", "2", {"PREFLIGHT_ATTEMPT": "1"}, "not resubmitting: 1 of 1 resubmissions used"),
    ("an error on every host", "2", {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, "not a host's fault"),
    ("the job would not fit", "4", {}, "partition debug has 3 usable node(s), the job needs 4"),
])
def test_no_resubmission_when_it_cannot_help(slurm_netns: SlurmCluster, tmp_path: Path, case: str, nodes: str,
                                             extra: dict[str, str], says: str) -> None:
    n2 = slurm_netns.node_names[1]
    env = _env(slurm_netns, tmp_path, PREFLIGHT=_faulty(tmp_path, n2), PREFLIGHT_RESUBMIT="1", **extra)
    job, state = slurm_netns.sbatch(SBATCH / "train-with-preflight.sbatch", ["-N", nodes, "--ntasks-per-node=1"],
                                      ["touch", str(tmp_path / "trained")], env, cwd=tmp_path)
    out = _output(tmp_path, "preflight-train", job)
    assert "ExitCode=3:0" in state, case + state + out
    assert f"bad nodes: {n2}" in out and says in out, case + out
    assert "resubmitted as job" not in out and _queue(slurm_netns) == []
