"""preflight under Open MPI's mpirun (`mpirun.openmpi`, by its full name: Debian's mpich may be installed
beside it): ranks from OMPI_COMM_WORLD_*, one verdict for all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.reports.json import load as load_report
from tests.helpers.ranks import base_env, free_port
from tests.helpers.tools import require_tool

pytestmark = pytest.mark.mpi


def mpirun(args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = base_env({"PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}", **(extra_env or {})})
    command = [require_tool("mpirun.openmpi", package="openmpi-bin"), "--allow-run-as-root", "--oversubscribe", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)


def test_mpirun_four_ranks_pass(tmp_path: Path) -> None:
    result = mpirun(["-n", "4", "preflight", "--skip", "probe", "--json", str(tmp_path / "r.json")])
    assert result.returncode == 0, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    assert report.meta.launcher == "mpirun" and report.meta.world_size == 4
    assert [f.world.local_rank for f in report.ranks] == [0, 1, 2, 3]
    # The port is derived from Open MPI's job namespace: all ranks agree without MASTER_PORT.
    assert len({f.world.master_port for f in report.ranks}) == 1
    assert "OMPI_COMM_WORLD_RANK" in report.ranks[2].world.raw


def test_mpirun_exit_code_is_the_verdict(tmp_path: Path) -> None:
    result = mpirun(["-n", "2", "-x", "TORCH_NCCL_ASYNC_ERROR_HANDLING=0", "preflight", "--skip", "probe",
                     "--json", str(tmp_path / "r.json")])
    assert result.returncode == 3, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    assert [f.ranks for f in report.findings if f.check_id == "NCCL001"] == [[0, 1]]


@pytest.mark.netns
def test_mpirun_across_two_network_namespace_hosts(netns_hosts, tmp_path: Path) -> None:
    """Open MPI's rsh launcher, its remote shell an agent that enters the fake host: orted on each host."""
    hosts = netns_hosts(2)
    env = base_env({"PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
                    "MASTER_ADDR": hosts[0].hostname, "MASTER_PORT": str(free_port())})
    command = [require_tool("mpirun.openmpi", package="openmpi-bin"), "--allow-run-as-root", "--oversubscribe",
               "--mca", "plm_rsh_agent", str(hosts.rsh_agent()), "--mca", "oob_tcp_if_include", "ib0",
               "-H", f"{hosts[0].hostname}:2,{hosts[1].hostname}:2", "-n", "4",
               "-x", "PATH", "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "OMP_NUM_THREADS",
               "preflight", "--skip", "probe", "--json", str(tmp_path / "r.json")]
    result = hosts[0].run(command, env=env, check=False, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = load_report(tmp_path / "r.json")
    assert report.meta.launcher == "mpirun" and report.meta.world_size == 4
    assert [(f.host, f.world.local_rank, f.world.node_rank) for f in report.ranks] == [
        (hosts[node].hostname, local, node) for node in (0, 1) for local in (0, 1)]
