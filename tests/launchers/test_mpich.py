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
