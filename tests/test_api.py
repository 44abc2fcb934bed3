"""preflight.check inside a real job: torchrun, 4 gloo ranks, a 2x2 DeviceMesh, then a training step.

The trainer (tests/helpers/trainer.py) is an ordinary training script: it initialises the
process group and the mesh, calls the API, and trains only when it passed. Its ranks write
what happened to files the tests read. The fault is planted from the test side only, with
tests/helpers/ranks.plant_env: rank 2's NCCL_SOCKET_IFNAME names no interface (an error,
NCCL008; gloo ignores the variable, so the job's own process group forms regardless).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.ranks import PYTHON, base_env, plant_env

# Quiet (tests/helpers/quiet.py): the healthy job's probes judge its groups' bandwidth against each other, and
# another worker's load on the two cores once made two healthy ranks a straggler (BW003: a clean clone,
# 2026-12-02, the machine at its slowest), failing the healthy run and every test reading it. Every test of
# the `healthy` run is quiet (whichever comes first makes the run). The planted fault's run never probes (its
# error stops the job first) and the hang's asserts no bandwidth (benchmarks/api_hang_repeat.py repeats it
# pinned to one CPU): they run beside the other workers.
QUIET = pytest.mark.quiet

TRAINER = Path(__file__).resolve().parent / "helpers" / "trainer.py"
ROOT = TRAINER.parents[2]
WORLD = 4


def torchrun(out: Path, mode: str, env: dict[str, str] | None = None, code: int = 0) -> dict[int, dict[str, Any]]:
    """Run the trainer under a real torchrun (exit code `code`); every rank's record, by rank."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(env or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(ROOT)) if p)  # the trainer's imports
    done = subprocess.run(
        [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(WORLD), str(TRAINER),
         str(out), mode],
        env=base_env(env), capture_output=True, text=True, timeout=240, cwd=out)
    assert (done.returncode == 0) == (code == 0), done.stdout[-3000:] + done.stderr[-3000:]
    return {rank: json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(WORLD)}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("api-healthy")
    (out / "ckpt").mkdir()  # preflight.check(storage=None) reads PREFLIGHT_STORAGE, as the CLI does
    return out, torchrun(out, "full", {"PREFLIGHT_HISTORY": f"sqlite:///{out / 'history.db'}",
                                       "PREFLIGHT_STORAGE": str(out / "ckpt")})


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("api-faulty")
    plant = plant_env(out, {2: "os.environ['NCCL_SOCKET_IFNAME'] = 'nosuch9'"})
    return out, torchrun(out, "mesh", plant)


@QUIET
def test_a_healthy_job_passes_then_trains_on_its_own_groups(healthy: tuple[Path, dict]) -> None:
    out, ranks = healthy
    for rank, record in ranks.items():
        assert record["mesh"]["outcome"] == "passed", record
        assert record["world"]["outcome"] == "passed", record
        # 0+1+2+3 all_reduced over the default group, right after preflight: the job's group still works
        assert record["step"] == 6.0, rank
        # Every rank has rank 0's choice of hosts as data on its JobReport (one host here: kept).
        assert record["mesh"]["keep_one"]["chosen"] and len(record["mesh"]["keep_one"]["kept"]) == 1, record
    report = json.loads((out / "mesh.json").read_text())
    assert report["meta"]["mesh"] == "dp2,tp2" and report["meta"]["backend"] == "gloo"
    assert report["meta"]["backend_reason"] == "the job's own process groups"
    # every dimension of the job's mesh was probed, group by group, and the world's all_reduce
    groups = {(p["dim"], tuple(p["ranks"])) for p in report["probes"]}
    assert {("dp", (0, 2)), ("dp", (1, 3)), ("tp", (0, 1)), ("tp", (2, 3)), ("world", (0, 1, 2, 3))} <= groups
    # each rank's own device was measured too, on the job's own groups, and agreed
    devices = [(r["rank"], r["kind"], r["sdc"]) for r in report["device_probes"]]
    assert devices == [(r, "cpu", "agrees") for r in range(4)]
    world = json.loads((out / "world.json").read_text())
    assert world["meta"]["mesh"] == "" and {p["dim"] for p in world["probes"]} == {"world"}
    assert report["meta"]["run_id"] != world["meta"]["run_id"]  # a second call, its own keys
    # the checkpoint path (PREFLIGHT_STORAGE), over the job's own store: one host, every rank saw it, nothing left
    [host] = report["storage"]["hosts"]
    assert host["ranks"] == [0, 1, 2, 3] and host["sees"] and host["write_gbps"] and host["read_gbps"]
    assert not [f for f in report["findings"] if f["check_id"].startswith("STO")]
    assert list((out / "ckpt").iterdir()) == []


@QUIET
def test_each_check_call_is_recorded_in_the_history(healthy: tuple[Path, dict]) -> None:
    # preflight.check(history=None) reads PREFLIGHT_HISTORY, as the CLI does: both calls of the job recorded.
    out, _ = healthy
    with sqlite3.connect(out / "history.db") as db:
        rows = db.execute("SELECT run_id, verdict FROM runs ORDER BY id").fetchall()
        figures = db.execute("SELECT count(*) FROM figures").fetchone()[0]
    assert [run_id for run_id, _ in rows] == ["check-1", "check-2"] and figures > 0


@QUIET
def test_the_process_is_left_as_it_was_found(healthy: tuple[Path, dict]) -> None:
    """Environment, signal handlers, log levels, process groups, the gc's frozen set: all unchanged."""
    _, ranks = healthy
    for record in ranks.values():
        assert record["mesh"]["changed"] == [] and record["world"]["changed"] == []


def test_a_planted_fault_stops_every_rank_before_training(faulty: tuple[Path, dict]) -> None:
    out, ranks = faulty
    messages = {record["mesh"].get("message") for record in ranks.values()}
    assert len(messages) == 1  # the same exception on every rank
    for record in ranks.values():
        assert record["mesh"]["outcome"] == "PreflightFailed" and record["mesh"]["exit_code"] == 3
        assert record["mesh"]["finding_ranks"]["NCCL008"] == [2]
        assert "step" not in record  # it never trained
        assert record["mesh"]["changed"] == []
        # One host, so the fault is everyone's: the choice refuses to pick hosts, and says why.
        assert not record["mesh"]["keep_one"]["chosen"] and "every host shares" in record["mesh"]["keep_one"]["why"]
        assert record["warned"] == {"exit_code": 3, "warnings": ["PreflightWarning"]}  # on_failure="warn"
    report = json.loads((out / "mesh.json").read_text())
    assert report["verdict"] == "failed"
    fault = next(f for f in report["findings"] if f["check_id"] == "NCCL008")
    assert fault["ranks"] == [2] and "nosuch9" in fault["message"]


@QUIET
def test_bad_calls_give_one_clear_error_each(healthy: tuple[Path, dict]) -> None:
    _, ranks = healthy
    expected = [
        ("TypeError", "mesh must be a torch DeviceMesh or None, not str"),
        ("ValueError", "pass the job's whole mesh, not a slice of it"),
        ("TypeError", "timeout_s (--timeout) must be a number of seconds, not str"),
        ("TypeError", "skip (--skip) must be a list of strings, not str"),
        ("ValueError", "on_failure='ignore': one of raise, warn, return"),
        ("ValueError", "unknown tag 'nosuchtag'"),
        ("ValueError", "probe_timeout_s (--probe-timeout)=1000000000.0: must be above 0 and at most 604800"),
        ("TypeError", "device_budget_s (--device-budget) must be a number of seconds, not str"),
        ("ValueError", "--storage '/nonexistent/ckpt': no such directory on this host"),
    ]
    for record in ranks.values():
        assert len(record["errors"]) == len(expected)
        for error, (kind, text) in zip(record["errors"], expected):
            assert error.startswith(f"{kind}: preflight.check: ") and text in error and "\n" not in error


def test_without_a_process_group_the_error_says_what_to_do() -> None:
    import preflight

    with pytest.raises(RuntimeError, match="no default process group; call init_process_group"):
        preflight.check()


def test_a_probe_hang_in_the_jobs_own_group_says_stuck_on_every_rank(tmp_path: Path) -> None:
    """Rank 3 never enters its all_to_all (a planted skip): the job's tp group [2, 3] hangs.

    Every rank still gets the verdict, with the hang named, and `stuck`, so the trainer leaves
    by os._exit instead of waiting on the job's own communicator (the process would hang).

    Rank 1 is slow after its call returns (3 s, a loaded node): rank 0 leaves as soon as every
    rank has read the verdict, and torchrun stops every worker once one exits non-zero, so a
    trainer that left at once lost rank 1's record (CI, once: "rank 1 wrote no rank-1.json").
    The trainer leaves only when every rank's record is written; this slow rank shows it does."""
    plant = plant_env(tmp_path, {1: """
        import time
        import preflight
        _check = preflight.check
        def check(*args, **kwargs):
            try:
                return _check(*args, **kwargs)
            finally:
                time.sleep(3.0)
        preflight.check = check
    """, 3: """
        import torch.distributed as dist
        dist.all_to_all_single = lambda *args, **kwargs: None
    """})
    ranks = torchrun(tmp_path / "out", "hang", plant, code=3)
    messages = {record["mesh"]["message"] for record in ranks.values()}
    assert len(messages) == 1
    for record in ranks.values():
        assert record["mesh"]["outcome"] == "PreflightFailed" and record["mesh"]["stuck"] is True
        assert record["mesh"]["finding_ranks"]["BW002"] == [3]
