"""The device probes for real: env:// ranks on gloo, faults planted from outside the package.

A sitecustomize (tests/helpers/ranks.plant_env) wraps torch's public matmul entry points on
one rank: three real products per call (a device ~3x slower at matrix products), or one entry
of every product nudged by 1.0 (a device that computes wrong numbers). The slow rank must be
named alone by the matrix check (DEV003, a warning), the wrong one alone by the correctness
check (DEV001, an error, exit 3), each with host and device; and nothing else is blamed.
Repetition is modest here (suite time); the 10-run figures are in docs/probes.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.ranks import plant_env, read_json, run_cli, spawn_env_ranks

DEVICE_IDS = {f"DEV00{i}" for i in range(1, 10)}
# The collectives are not what these tests look at: one small all_reduce keeps each run short.
QUICK = ["--ops", "all_reduce", "--sizes", "64KiB", "--warmup", "1", "--iters", "3", "--skip", "gpu,nic"]

SLOW_MATMUL = """
    import torch
    def _three_times(real):
        def wrapper(*args, **kwargs):
            real(*args, **kwargs)
            real(*args, **kwargs)
            return real(*args, **kwargs)
        return wrapper
    torch.matmul = _three_times(torch.matmul)
    torch.mm = _three_times(torch.mm)
    torch.Tensor.__matmul__ = _three_times(torch.Tensor.__matmul__)
"""
WRONG_MATMUL = """
    import torch
    def _nudged(real):
        def wrapper(*args, **kwargs):
            out = real(*args, **kwargs)
            out.view(-1)[0] += 1.0
            return out
        return wrapper
    torch.matmul = _nudged(torch.matmul)
    torch.mm = _nudged(torch.mm)
    torch.Tensor.__matmul__ = _nudged(torch.Tensor.__matmul__)
"""


def run_env_ranks(tmp_path: Path, n: int, plants: dict[int, str] | None = None,
                  args: list[str] | None = None, name: str = "report.json") -> tuple[dict, dict]:
    """n env:// ranks with the plants; (rank 0's JSON report, rank -> exit code)."""
    out = tmp_path / name
    env = plant_env(tmp_path / name.replace(".json", ""), plants) if plants else None
    runs = spawn_env_ranks(n, [*QUICK, *(args or []), "--json", str(out)], common_env=env, timeout=240)
    assert out.exists(), "\n".join(r.stdout + r.stderr for r in runs.values())
    return read_json(out), {rank: run.returncode for rank, run in runs.items()}


def device_findings(report: dict) -> list[dict]:
    """The findings of the device checks."""
    return [f for f in report["findings"] if f["check_id"] in DEVICE_IDS]


# Quiet: on CPU the device figures are the shared cores' and memory's; another worker's ranks on the same
# two cores took a healthy rank's copy to 36-46% of its siblings' (DEV004) and hid a planted 3x-slow
# rank (DEV003 at 51%) in the suite; on a GPU node each figure is the rank's own GPU's.
@pytest.mark.quiet
def test_healthy_ranks_are_measured_and_agree(tmp_path: Path) -> None:
    report, codes = run_env_ranks(tmp_path, 4)
    assert device_findings(report) == [], device_findings(report)
    rows = report["device_probes"]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    for row in rows:
        assert row["kind"] == "cpu" and row["sdc"] == "agrees" and row["errors"] == {}
        figures = {f["name"]: f for f in row["figures"]}
        assert set(figures) == {"gemm_fp32", "copy"}
        # Every figure carries its bursts of both passes, its siblings' median and no invented peak.
        assert all(f["value"] > 0 and len(f["bursts"]) == 10 for f in figures.values())
        assert figures["gemm_fp32"]["siblings_median"] > 0 and all(f["peak"] is None for f in figures.values())
        # One machine, one memory system: a CPU copy has no siblings here to be compared with (judge.one_memory).
        assert figures["copy"]["siblings_median"] is None
    # A testcase per device check in the JUnit-feeding outcomes, all passed.
    outcomes = {c["check_id"]: c["status"] for c in report["checks"] if c["check_id"] in DEVICE_IDS}
    assert outcomes == {check: "ok" for check in DEVICE_IDS}
    assert set(codes.values()) == {0}


@pytest.mark.quiet
def test_slow_matmul_rank_is_named_alone(tmp_path: Path) -> None:
    report, codes = run_env_ranks(tmp_path, 4, {2: SLOW_MATMUL})
    found = device_findings(report)
    assert [(f["check_id"], f["ranks"], f["severity"]) for f in found] == [("DEV003", [2], "warn")], found
    finding = found[0]
    assert finding["hosts"] == [report["device_probes"][2]["host"]] and finding["hosts"][0]
    assert f"rank 2 on {finding['hosts'][0]} CPU" in finding["message"]
    # Slow in both passes, at about a third of its siblings (3 products per call).
    assert all(m < 0.5 * t for m, t in zip(finding["data"]["passes"], finding["data"]["siblings_passes"]))
    assert set(codes.values()) == {0}  # a warning


def test_wrong_matmul_rank_is_an_error_naming_it_alone(tmp_path: Path) -> None:
    report, codes = run_env_ranks(tmp_path, 4, {1: WRONG_MATMUL})
    found = device_findings(report)
    assert [(f["check_id"], f["ranks"], f["severity"]) for f in found] == [("DEV001", [1], "error")], found
    finding = found[0]
    assert finding["data"]["reference_ranks"] == [0, 2, 3]
    device = finding["data"]["devices"][0]
    assert device["rank"] == 1 and device["kind"] == "cpu"
    assert device["host"] == report["device_probes"][1]["host"] != ""
    assert "rank 1 on" in finding["message"] and "differs" in finding["message"]
    assert [r["sdc"] for r in report["device_probes"]] == ["agrees", "differs", "agrees", "agrees"]
    assert report["exit_code"] == 3 and set(codes.values()) == {3}


def test_only_gpu_probe_runs_the_device_probes_and_no_collective(tmp_path: Path) -> None:
    out = tmp_path / "only.json"
    proc = run_cli(["launch", "-n", "2", "--only", "gpu-probe", "--json", str(out)], timeout=240)
    report = read_json(out)
    assert report["probes"] == [], proc.stdout
    assert [r["rank"] for r in report["device_probes"]] == [0, 1]
    # The device checks, and the run's own checks (RUN*), which watch every run whatever --only says.
    assert {c["check_id"] for c in report["checks"] if c["tag"] != "run"} == DEVICE_IDS
    assert {c["check_id"] for c in report["checks"] if c["tag"] == "run"} >= {"RUN001", "RUN004"}


def test_skip_gpu_probe_runs_the_collectives_without_the_device_probes(tmp_path: Path) -> None:
    out = tmp_path / "skip.json"
    run_cli(["launch", "-n", "2", *QUICK, "--skip", "gpu-probe", "--json", str(out)], timeout=240)
    report = read_json(out)
    assert report["probes"] and report["device_probes"] == []
    assert not {c["check_id"] for c in report["checks"]} & DEVICE_IDS


def test_expect_above_what_the_device_does_is_an_error(tmp_path: Path) -> None:
    report, _ = run_env_ranks(tmp_path, 2, args=["--expect", "gemm=1PFLOPS,hbm=500TB/s"])
    found = device_findings(report)
    assert {f["check_id"] for f in found} == {"DEV007"}
    assert sorted((f["ranks"][0], f["data"]["figure"]) for f in found) == [
        (0, "copy"), (0, "gemm_fp32"), (1, "copy"), (1, "gemm_fp32")]
    assert all(f["data"]["peak_source"] == "--expect" for f in found)
    assert {(f["data"]["figure"], f["data"]["peak"]) for f in found} == {("gemm_fp32", 1000.0), ("copy", 500_000.0)}
    assert report["exit_code"] == 3
