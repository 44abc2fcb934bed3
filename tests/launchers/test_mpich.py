"""preflight under MPICH's Hydra (`mpiexec.hydra`, Debian's mpich beside Open MPI, called by its
full name so neither shadows the other): ranks from PMI_RANK / PMI_SIZE / MPI_LOCALRANKID."""

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


def hydra(args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # Hydra passes the caller's environment to every rank. It names no job id in the ranks'
    # environment (PMI_FD only), so a test gives the port rather than share the default 29500.
    env = base_env({"PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
                    "MASTER_PORT": str(free_port()), **(extra_env or {})})
    command = [require_tool("mpiexec.hydra", package="mpich"), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)


def test_mpiexec_hydra_four_ranks_pass(tmp_path: Path) -> None:
    result = hydra(["-n", "4", "preflight", "--skip", "probe", "--json", str(tmp_path / "r.json")])
    assert result.returncode == 0, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    assert report.meta.launcher == "mpich" and report.meta.world_size == 4
    assert [f.world.local_rank for f in report.ranks] == [0, 1, 2, 3]
    assert [f.world.local_world_size for f in report.ranks] == [4, 4, 4, 4]
    assert report.ranks[2].world.raw["PMI_RANK"] == "2" and report.ranks[2].world.raw["MPI_LOCALNRANKS"] == "4"


def test_mpiexec_hydra_exit_code_is_the_verdict(tmp_path: Path) -> None:
    result = hydra(["-n", "2", "-genv", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0", "preflight", "--skip", "probe",
                    "--json", str(tmp_path / "r.json")])
    assert result.returncode == 3, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    assert [f.ranks for f in report.findings if f.check_id == "NCCL001"] == [[0, 1]]


@pytest.mark.netns
def test_mpiexec_hydra_across_two_network_namespace_hosts(netns_hosts, tmp_path: Path) -> None:
    """Hydra's rsh launcher, its remote shell an agent that enters the fake host: a proxy on each host."""
    hosts = netns_hosts(2)
    env = base_env({"PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
                    "MASTER_ADDR": hosts[0].hostname, "MASTER_PORT": str(free_port())})
    command = [require_tool("mpiexec.hydra", package="mpich"), "-launcher", "rsh",
               "-launcher-exec", str(hosts.rsh_agent()), "-hosts", f"{hosts[0].hostname}:2,{hosts[1].hostname}:2",
               "-n", "4", "preflight", "--skip", "probe", "--json", str(tmp_path / "r.json")]
    result = hosts[0].run(command, env=env, check=False, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = load_report(tmp_path / "r.json")
    assert report.meta.launcher == "mpich" and report.meta.world_size == 4
    assert [(f.host, f.world.local_rank, f.world.node_rank) for f in report.ranks] == [
        (hosts[node].hostname, local, node) for node in (0, 1) for local in (0, 1)]
