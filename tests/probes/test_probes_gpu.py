"""The NCCL path on one real NVIDIA GPU. Run with `pytest -m gpu` (the default run deselects these).

Each test asserts something that fails when the NCCL path is wrong: the report's backend is
nccl (not a silent gloo fallback), every op is verified at world size 1 and at world size 2
with two ranks sharing the GPU (a distinct NCCL_HOSTID per rank makes NCCL accept that, over
its network transport), a planted hang is named as BW002 with a written report and exit 3,
and the JSON holds NVML's facts of the real device. What they gave on an H100 is recorded in
the README's "Measured on GPU" section.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preflight.model.codec import from_builtins
from preflight.model.rank_table import RankTable
from preflight.model.rank_unpack import unpack
from tests.helpers.ranks import Placement, plant_env, read_json, run_cli, spawn_env_ranks

pytestmark = pytest.mark.gpu

OPS = "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast"
SIZES = ["--sizes", "1MiB,256MiB", "--warmup", "2", "--iters", "5"]
# Two ranks on the one GPU: a host id each, so NCCL connects them over its socket transport on lo.
TWO_ON_ONE_GPU = {r: Placement(env={"NCCL_HOSTID": f"preflight-gpu-test-{r}"}) for r in range(2)}
ONE_GPU_ENV = {"CUDA_VISIBLE_DEVICES": "0", "NCCL_SOCKET_IFNAME": "lo"}


def _probe_backend(report: dict) -> str:
    """The backend the probes used, as the report records it (meta.backend once the runner writes the used one)."""
    return report["meta"]["backend"]


def _check_every_op_verified(report: dict, world_size: int, ops: str = OPS) -> None:
    probes = report["probes"]
    assert {p["op"] for p in probes} == set(ops.split(","))
    assert all(p["verified"] and p["time_s"] > 0 and p["busbw_gbps"] >= 0 for p in probes), probes
    assert all(len(p["ranks"]) == world_size for p in probes)
    assert not [f for f in report["findings"] if f["check_id"].startswith("BW")], report["findings"]


def test_world_size_one_runs_on_nccl_and_verifies_every_op(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    proc = run_cli(["run", "--backend", "nccl", "--ops", OPS, *SIZES, "--json", str(out)], timeout=300)
    report = read_json(out)
    # One rank verifies every op on the GPU, but moves nothing between ranks: RUN012, exit 4 (issue 45).
    assert proc.returncode == 4, report["why"]
    assert [f["check_id"] for f in report["findings"] if f["severity"] != "info"] == ["RUN012"], report["findings"]
    assert _probe_backend(report) == "nccl"
    _check_every_op_verified(report, 1)


@pytest.mark.parametrize(("mesh", "ops"), [("tp2", OPS), ("pp2", "send_recv")])
def test_two_ranks_on_one_gpu_verify_every_op_over_nccl(tmp_path: Path, mesh: str, ops: str) -> None:
    out = tmp_path / "gpu2.json"
    # --backend auto: both ranks can bind a GPU, so auto must choose nccl (not fall back to gloo).
    runs = spawn_env_ranks(2, ["--backend", "auto", "--mesh", mesh, "--ops", ops, *SIZES, "--json", str(out)],
                           place=TWO_ON_ONE_GPU, common_env=ONE_GPU_ENV, timeout=300)
    report = read_json(out)
    assert {r.returncode for r in runs.values()} <= {0, 1}, [r.stderr[-2000:] for r in runs.values()]
    assert _probe_backend(report) == "nccl"
    _check_every_op_verified(report, 2, ops)
    # Issue 13's profiles on real facts: this H100 has no active NVLink (a single GPU in a VM), so the
    # NVLink profile (8x H100 SXM, ~370 GB/s) must not be chosen, and no other is invented.
    assert {p["expected_source"] for p in report["probes"]} == {""}, report["probes"]
    assert not [f for f in report["findings"] if f["check_id"] in ("BW011", "BW001")]


@pytest.mark.parametrize("async_error_handling", [None, "1", "2", "3"])
def test_a_rank_stuck_on_the_gpu_is_named_as_bw002_with_a_written_report_and_exit_3(
        tmp_path: Path, async_error_handling: str | None) -> None:
    """Whatever the user's TORCH_NCCL_ASYNC_ERROR_HANDLING, the probe groups' watchdog must not kill rank 0."""
    out = tmp_path / "hang.json"
    user = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": async_error_handling} if async_error_handling else {}
    # Rank 1 queues a ~60 s kernel before its all_to_all: the collective cannot start on its stream.
    plant = plant_env(tmp_path, {1: """
        import torch, torch.distributed as dist
        real = dist.all_to_all_single
        def all_to_all_single(*args, **kwargs):
            torch.cuda._sleep(60 * 2_000_000_000)
            return real(*args, **kwargs)
        dist.all_to_all_single = all_to_all_single
    """})
    runs = spawn_env_ranks(2, ["--backend", "nccl", "--ops", "all_reduce,all_to_all", "--sizes", "1MiB",
                               "--probe-timeout", "5", "--json", str(out)],
                           place=TWO_ON_ONE_GPU, common_env={**ONE_GPU_ENV, **plant, **user}, timeout=240)
    assert out.exists(), [r.stderr[-2000:] for r in runs.values()]
    report = read_json(out)
    assert report["exit_code"] == 3 and runs[0].returncode == 3, report["why"]
    # Rank 0 gives its verdict at the probe deadline, not when the 60 s kernel ends (generous bound).
    assert runs[0].elapsed_s < 45, (runs[0].elapsed_s, runs[1].elapsed_s)
    (hang,) = [f for f in report["findings"] if f["check_id"] == "BW002"]
    assert hang["data"]["op"] == "all_to_all" and 1 in hang["ranks"] + hang["data"]["waiting"]


def test_nvml_facts_of_the_real_device_are_in_the_json(tmp_path: Path) -> None:
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
        total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
    finally:
        pynvml.nvmlShutdown()
    text = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
    out = tmp_path / "facts.json"
    run_cli(["run", "--skip", "probe", "--json", str(out)], timeout=300)
    (facts,) = unpack(from_builtins(read_json(out)["rank_table"], RankTable))
    first = next(g for g in facts.gpus if g.pci_bus_id == text(bus))
    assert first.name == text(name) and first.memory_total_bytes == total and first.uuid.startswith("GPU-")
    assert first.nvlink_version in (0, 1, 2, 3, 4, 5, 6) and first.nvlink_active >= 0 and not first.error


def test_a_rank_held_up_before_nccl_setup_is_named_while_rank_0_sits_in_ncclcomminitrank(tmp_path: Path) -> None:
    """Eager NCCL init blocks rank 0 in ncclCommInitRank, which no torch timeout covers: the setup deadline does."""
    from tests.probes.test_setup import HELD_UP_BEFORE_SETUP

    out = tmp_path / "setup.json"
    # Held up past the setup deadline (2 s probe timeout + 15 s), while rank 0 waits inside NCCL.
    plant = plant_env(tmp_path, {1: HELD_UP_BEFORE_SETUP.format(seconds=30)})
    runs = spawn_env_ranks(2, ["--backend", "nccl", "--ops", "all_reduce", "--sizes", "1MiB", "--probe-timeout", "2",
                               "--json", str(out)],
                           place=TWO_ON_ONE_GPU, common_env={**ONE_GPU_ENV, **plant}, timeout=120)
    report = read_json(out)
    hangs = [f for f in report["findings"] if f["check_id"] == "BW002"]
    assert len(hangs) == 1, report["findings"]
    hang = hangs[0]
    assert hang["ranks"] == [1] and hang["data"]["culprits"] == {"1": "never reached communicator setup"}, hang
    assert runs[0].returncode == 3 and runs[0].elapsed_s < 60, (runs[0].elapsed_s, runs[0].stderr[-1500:])
