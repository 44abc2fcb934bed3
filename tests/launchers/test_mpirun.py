"""preflight under Open MPI's mpirun (`mpirun.openmpi`, by its full name: Debian's mpich may be installed
beside it): ranks from OMPI_COMM_WORLD_*, one verdict for all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.reports.json import load as load_report
from tests.helpers.ranks import base_env
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
