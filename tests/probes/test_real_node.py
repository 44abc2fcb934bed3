"""The real node: a rank of an 8-GPU host, LOCAL_RANK 0..7 with all 8 devices visible, through the
CUDA model (tests/helpers/fake_cuda.py: per-thread current device starting at 0, every call
recorded with its device and thread, free memory per device, NCCL's refusal of one GPU twice).

In-process: one rank on LOCAL_RANK 5 runs the probes' whole path (backend vote, session in a
helper thread, device probes in another, the collectives in the caller's) on a real gloo group;
nothing may touch another device or reach one through a bare "cuda". Across processes: 2
network-namespace hosts x 8 env:// ranks, each with its own model of its host's 8 GPUs.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from preflight.channel.liveness import RankLiveness
from preflight.lib.deadline import abandoned_alive
from preflight.lib.waiting import wait_until
from preflight.model import World
from preflight.options import RunOptions
from preflight.probes import orchestrate
from preflight.probes.device import run as device_run
from tests.helpers.fake_cuda import MODEL_ENV, FakeCuda, gpu
from tests.helpers.netns import FakeNetwork
from tests.helpers.ranks import free_port, plant_env, read_json, spawn_env_ranks, spread
from tests.probes.device.test_run_gloo import DEVICE_IDS, WRONG_MATMUL

ROOT = Path(__file__).resolve().parents[2]
NVML_FIXTURES = ROOT / "tests" / "fixtures" / "nvml"

# Model rates: a "GPU" slow enough that a burst is one product of the family's smallest size (256^3)
# on the CPU that holds its tensors; free memory that shrinks the operands to their floor.
SMALL_FREE = 320 * 2**20


def _options(*extra: str) -> RunOptions:
    typed: dict[str, Any] = {"only": [e.split("=")[1] for e in extra if e.startswith("only=")]}
    return RunOptions.build(ops="all_reduce", sizes="64KiB", warmup=1, iters=2, device_budget_s=0.5,
                            probe_timeout_s=30.0, **typed).for_world(1)


def _run_one_rank(model: FakeCuda, local_rank: int, options: RunOptions) -> Any:
    """Rank 0 of 1 on LOCAL_RANK `local_rank` of 8, the whole probe path, with the model as torch.cuda."""
    port = free_port()
    world = World(launcher="env", rank=0, world_size=1, local_rank=local_rank, local_world_size=8, host="node3",
                  master_addr="127.0.0.1", master_port=port)
    store = dist.TCPStore("127.0.0.1", port, 1, is_master=True, wait_for_workers=False)
    with model.install():
        try:
            return orchestrate.run_probes(world, options, store, alive=RankLiveness(1, 0, store))
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()


@pytest.fixture
def model() -> FakeCuda:
    return FakeCuda([gpu(i, free=SMALL_FREE) for i in range(8)], rates={"gemm": 0.002, "copy": 2.0, "host": 1.0})


def test_local_rank_5_touches_only_gpu_5_in_every_thread(model: FakeCuda) -> None:
    outcome = _run_one_rank(model, 5, _options())
    assert outcome.backend == "nccl"  # the model's NCCL, gloo underneath
    threads = {c.thread for c in model.calls}
    assert threads == {threading.current_thread().name, "preflight-probe-setup"}  # the caller and bounded threads
    # set-up's thread (binding), the caller's (the collectives) and the device family's each set GPU 5 first
    assert [c.thread for c in model.calls if c.what == "set_device"].count("preflight-probe-setup") >= 2
    assert model.on_other_devices(5) == []  # every alloc / event / synchronize named GPU 5, none bare
    assert model.contexts == {5}  # no CUDA context (and its memory) on any other GPU
    allocs = [c for c in model.calls if c.what == "alloc"]
    assert allocs and {c.thread for c in allocs} >= {"preflight-probe-setup", threading.current_thread().name}
    (row,) = outcome.device_rows
    assert (row.index, row.uuid) == (5, "GPU-00000005-1111-2222-3333-444444444444")
    assert {f.name for f in row.figures} == {"gemm_bf16", "gemm_fp16", "gemm_tf32", "copy", "h2d", "d2h"}
    assert row.sized.startswith("operands shrunk to 256^3")  # 48 MiB free: shrunk, and so judged by no peak
    assert all(f.peak is None for f in row.figures)
    # one rank: its collectives ran but compared nothing, so the plan says it measured nothing (issue 45)
    assert [f.check_id for f in outcome.findings] == ["RUN012"]
    assert outcome.results and all(r.verified for r in outcome.results)  # the collective ran on GPU 5's buffers
    # The family's cached blocks and its thread's cuBLAS workspace given back; what stays is the block
    # the process's first product keeps for good (an H200 kept it too), and only on GPU 5.
    kept = [0] * 5 + [model.blas_first_product_bytes] + [0] * 2
    assert model.reserved == model.allocated == kept


def test_a_bare_cuda_device_would_land_on_gpu_0_and_the_model_says_so(model: FakeCuda) -> None:
    """The model's own strictness: what the test above rules out is what it records."""
    with model.install():
        done = []
        worker = threading.Thread(target=lambda: done.append(torch.ones(4, device="cuda")))
        model.set_device(5)  # this thread's device; the worker starts on 0, as CUDA's threads do
        worker.start()
        worker.join()
        torch.zeros(4, device=torch.device("cuda", 5))
    bare = model.on_other_devices(5)
    assert [(c.what, c.device, c.named) for c in bare] == [("alloc", 0, False)]


def test_too_little_free_memory_skips_every_figure_with_the_reason_never_oom(model: FakeCuda) -> None:
    model.devices[2]["free"] = 64 * 2**20
    outcome = _run_one_rank(model, 2, _options("only=gpu-probe"))
    (row,) = outcome.device_rows
    assert row.figures == [] and row.errors == {}
    assert set(row.skipped) == {"gemm_bf16", "gemm_fp16", "gemm_tf32", "copy", "sdc", "h2d", "d2h"}
    assert "only 64 MiB free on the device" in row.skipped["copy"]
    assert not [f for f in outcome.findings if f.check_id == "DEV009"]
    assert model.reserved[2] == 0


def test_an_nvml_that_never_answers_is_named_within_the_device_bound_not_waited_for(
        model: FakeCuda, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvmlInit on a driver that stopped answering blocks for minutes (nvidia-smi hangs too): the
    device's row says it did not finish within its bound, and the rank goes on well before the hang ends."""
    # The bound is the family's budget x 3 plus a grace for opening the device (20 s, for a real
    # GPU's context); 2 s here (a 3.5 s bound), so the hang past it is 8 s and not half a minute.
    monkeypatch.setattr(device_run, "GRACE_S", 2.0)
    hung = tmp_path / "hung_nvml.json"
    hung.write_text(json.dumps({"extends": str(NVML_FIXTURES / "healthy_h100x8.json"),
                                "system": {"init": {"hang_s": 8}}}))  # past the bound (3.5 s here)
    monkeypatch.setenv("PREFLIGHT_NVML_REPLAY", str(hung))
    outcome = _run_one_rank(model, 4, _options("only=gpu-probe"))
    (row,) = outcome.device_rows
    assert row.figures == [] and "did not finish within 3.5s" in row.errors["every figure"], row.errors
    # The abandoned thread is this test process's (a rank would leave by os._exit): let it end, so
    # that no later test in the same worker finds a thread given up on still running.
    assert wait_until(lambda: not abandoned_alive(), 120.0)


def test_a_gpu_with_2_gib_free_shrinks_its_operands_and_gives_back_what_it_reserved() -> None:
    """A trainer holds 78 of 80 GiB on GPU 4: the family fits a quarter of the 2 GiB left, never DEV009."""
    model = FakeCuda([gpu(i, free=2 * 2**30) for i in range(8)], rates={"gemm": 0.05, "copy": 50.0, "host": 10.0})
    with model.install():
        held = torch.empty(2**20, dtype=torch.uint8, device=torch.device("cuda", 4))  # the trainer's own tensor
        reserved_before = model.memory_reserved(4)
    outcome = _run_one_rank(model, 4, _options("only=gpu-probe"))
    (row,) = outcome.device_rows
    assert row.sized.startswith("operands shrunk to 1024^3 products and 64 MiB copies: 2047 MiB free")
    assert {f.name for f in row.figures} == {"gemm_bf16", "gemm_fp16", "gemm_tf32", "copy", "h2d", "d2h"}
    assert not [f for f in outcome.findings if f.check_id == "DEV009"] and row.errors == {}
    peak_use = max(c.nbytes for c in model.calls if c.what == "alloc")
    # the trainer's 1 MiB and the block the process's first product keeps; no workspace, no cached block
    assert peak_use <= 2**30 // 4 and model.memory_reserved(4) == reserved_before + model.blas_first_product_bytes
    del held


def test_a_gpu_lost_right_after_binding_is_a_finding_not_a_crashed_rank() -> None:
    model = FakeCuda([gpu(i, free=SMALL_FREE) for i in range(8)], lost_after_sets=2)  # voted, bound, then gone
    outcome = _run_one_rank(model, 3, _options())
    (finding,) = outcome.findings
    assert finding.check_id == "BW009" and "device cuda:3: RuntimeError: CUDA error: GPU is lost" in finding.message
    assert outcome.left_pending  # the groups are left as they are: the process leaves by os._exit


def test_a_second_rank_of_the_host_on_the_same_gpu_is_refused_like_nccl() -> None:
    model = FakeCuda([gpu(i) for i in range(8)])
    store = dist.HashStore()
    with model.install():
        model.node.join("world", 0, "GPU-A")
        model.node.join("world", 0, "GPU-A")  # the same rank again: fine
        with pytest.raises(RuntimeError, match="Duplicate GPU detected : rank 1 and rank 0"):
            model.node.join("world", 1, "GPU-A")
        store.add(f"fake-cuda/gpu/{model.devices[3]['uuid']}", 1)
        with pytest.raises(RuntimeError, match="Duplicate GPU detected"):
            dist.init_process_group("nccl", store=store, rank=1, world_size=2, device_id=torch.device("cuda", 3))


def model_env(record: Path, host: int, **spec: Any) -> dict[str, str]:
    """The environment that gives a rank process its host's model (tests/helpers/fake_cuda.install_from_env)."""
    return {MODEL_ENV: json.dumps({"devices": 8, "host": str(host + 1), "free": SMALL_FREE, "record": str(record),
                                   "rates": {"gemm": 0.002, "copy": 2.0, "host": 1.0}, **spec})}


@pytest.mark.parametrize("api", ["new", "legacy"])
def test_the_trainers_tf32_setting_is_measured_under_and_left_as_found(model: FakeCuda, api: str) -> None:
    """torch >= 2.9: a trainer that set fp32_precision (reading allow_tf32 would then raise) or the legacy flag."""
    matmul = torch.backends.cuda.matmul
    saved = matmul.fp32_precision
    try:
        if api == "new":
            matmul.fp32_precision = "tf32"
        else:
            matmul.allow_tf32 = True
        outcome = _run_one_rank(model, 1, _options("only=gpu-probe"))
        assert matmul.fp32_precision == "tf32"
        if api == "legacy":
            assert matmul.allow_tf32 is True and torch.get_float32_matmul_precision() == "high"
        else:
            with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
                matmul.allow_tf32  # noqa: B018  (torch's own rule: the legacy read still refuses, as before)
        (row,) = outcome.device_rows
        assert row.figure("gemm_tf32") is not None and row.errors == {}
        assert not [f for f in outcome.findings if f.check_id == "DEV009"]
    finally:
        matmul.fp32_precision = saved
        torch.set_float32_matmul_precision("highest")


MODEL = f"""
    import sys
    sys.path.insert(0, {str(ROOT)!r})
    from tests.helpers.fake_cuda import install_from_env
    install_from_env()
"""


def run_node(hosts: FakeNetwork, tmp_path: Path, name: str, slow: tuple[int, int] | None = None,
             wrong: int | None = None) -> tuple[dict, set[int], dict[int, dict]]:
    """16 env:// ranks, 8 per host (LOCAL_RANK 0..7, each process seeing its host's 8 model GPUs);
    (the JSON report, the exit codes, rank -> the model's record of that rank's calls)."""
    record = tmp_path / name
    record.mkdir()
    plants = {rank: MODEL + (WRONG_MATMUL if rank == wrong else "") for rank in range(16)}
    env = {**plant_env(record, plants), "GLOO_SOCKET_IFNAME": "ib0"}
    host_env = {h: model_env(record, h, **({"slow": {str(slow[1]): 3.0}} if slow and slow[0] == h else {}))
                for h in range(2)}
    out = record / "report.json"
    runs = spawn_env_ranks(16, ["--only", "gpu-probe", "--device-budget", "0.5", "--json", str(out)],
                           place=spread(hosts, 8, host_env), master_addr=hosts[0].address, common_env=env,
                           timeout=540)
    assert out.exists(), "\n".join(r.stdout + r.stderr for r in runs.values())
    calls = {rank: json.loads((record / f"calls-{rank}.json").read_text()) for rank in range(16)}
    return read_json(out), {r.returncode for r in runs.values()}, calls


@pytest.mark.netns
@pytest.mark.timeout(1200)  # two runs of 16 ranks on 2 shared cores; a does-not-hang bound
def test_two_hosts_of_eight_gpus_every_rank_on_its_own_gpu(netns_hosts, tmp_path: Path) -> None:
    hosts: FakeNetwork = netns_hosts(2, prefix="pfrn")
    report, codes, calls = run_node(hosts, tmp_path, "healthy")
    for rank, made in calls.items():  # whatever the thread, only the rank's own GPU, always by name
        mine = int(made["local_rank"])
        assert mine == rank % 8
        stray = [c for c in made["calls"] if c["device"] != mine or not (c["named"] or c["what"] == "pin")]
        assert made["calls"] and stray == [], (rank, stray[:3])
    rows = report["device_probes"]
    assert len({(r["host"], r["index"], r["uuid"]) for r in rows}) == 16
    assert {r["host"] for r in rows} == {hosts[0].hostname, hosts[1].hostname}
    assert [f for f in report["findings"] if f["check_id"] in DEVICE_IDS] == [] and codes == {0}

    report, codes, _ = run_node(hosts, tmp_path, "planted", slow=(1, 3), wrong=2)
    found = sorted({(f["check_id"], tuple(f["ranks"]), tuple(f["hosts"]))
                    for f in report["findings"] if f["check_id"] in DEVICE_IDS})  # DEV003: one per matrix figure
    assert found == [("DEV001", (2,), (hosts[0].hostname,)), ("DEV003", (11,), (hosts[1].hostname,))]
    by_rank = {r["rank"]: r for r in report["device_probes"]}
    assert (by_rank[11]["index"], by_rank[2]["index"]) == (3, 2)
    assert by_rank[11]["uuid"] != by_rank[3]["uuid"]  # GPU 3 of the other host is another GPU


def test_a_nearly_full_gpu_skips_the_collective_sizes_that_would_not_fit_with_the_reason() -> None:
    """A trainer holds all but 320 MiB of GPU 6: the 256 MiB all_to_all (512 MiB of buffers) is skipped on
    every rank with its reason (BW014), never allocated into an out-of-memory error read as a failed or hung
    collective; the 64 KiB one is measured."""
    model = FakeCuda([gpu(i, free=SMALL_FREE) for i in range(8)], rates={"gemm": 0.002, "copy": 2.0, "host": 1.0})
    options = RunOptions.build(ops="all_to_all", sizes="64KiB,256MiB", warmup=1, iters=2, probe_timeout_s=30.0,
                               skip=["gpu-probe"]).for_world(1)
    outcome = _run_one_rank(model, 6, options)
    assert [(r.op, r.size_bytes) for r in outcome.results] == [("all_to_all", 64 * 1024)]
    assert all(r.verified for r in outcome.results)
    (skipped,) = [f for f in outcome.findings if f.check_id == "BW014"]
    assert "all_to_all at 256 MiB on world needs about 1024 MiB" in skipped.message
    assert "the least free among the ranks is 320 MiB" in skipped.message
    # one rank: nothing compared (RUN012, issue 45); nothing else but the skipped size's info
    assert [f.check_id for f in outcome.findings if f.severity.value not in ("info",)] == ["RUN012"]
    assert max(c.nbytes for c in model.calls if c.what == "alloc") < 64 * 2**20  # nothing big was allocated
