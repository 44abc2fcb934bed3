"""`preflight launch` and torchrun: torch's own elastic launcher, real worker processes."""

from __future__ import annotations

import socket
import subprocess
import sys

from preflight.model import JobReport
from tests.helpers.ranks import base_env, plant_env, read_json, run_cli


def test_launch_four_ranks_passes(tmp_path) -> None:
    result = run_cli(["launch", "-n", "4", "--skip", "probe", "--json", str(tmp_path / "r.json")], timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED" in result.stdout
    report = JobReport.from_dict(read_json(tmp_path / "r.json"))
    assert report.meta.launcher == "torchrun" and report.meta.world_size == 4
    assert [f.rank for f in report.ranks] == [0, 1, 2, 3]
    # preflight launch defaults to OMP_NUM_THREADS=1 for its ranks.
    assert {f.env.get("OMP_NUM_THREADS") for f in report.ranks} == {"1"}


def test_launch_exits_3_naming_the_rank_with_async_error_handling_off(tmp_path) -> None:
    planted = plant_env(tmp_path, {3: 'os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"'})
    result = run_cli(["launch", "-n", "4", "--skip", "probe", "--json", str(tmp_path / "r.json")], planted,
                     timeout=180)
    assert result.returncode == 3, result.stdout + result.stderr
    report = JobReport.from_dict(read_json(tmp_path / "r.json"))
    [finding] = [f for f in report.findings if f.check_id == "NCCL001"]
    assert finding.ranks == [3] and finding.hosts == [socket.gethostname()]
    assert "NCCL001" in result.stdout and "rank 3" in result.stdout


def test_torchrun_workers_resolve_and_join_the_agent_store(tmp_path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "preflight", "--skip", "probe", "--json", str(tmp_path / "r.json")]
    result = subprocess.run(command, env=base_env(), capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    report = JobReport.from_dict(read_json(tmp_path / "r.json"))
    assert report.meta.launcher == "torchrun" and report.meta.world_size == 2
    worlds = [facts.world for facts in report.ranks]
    assert all(w.use_agent_store for w in worlds)
    assert [w.local_rank for w in worlds] == [0, 1]
    assert worlds[1].raw["TORCHELASTIC_RUN_ID"] == worlds[0].raw["TORCHELASTIC_RUN_ID"]
