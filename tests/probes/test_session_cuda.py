"""GPU binding, backend choice, NCCL environment and nccl-tests timing, through the real session
and timing code with the CUDA boundary replaced by a data-driven FAKE (tests/helpers/fake_cuda.py)."""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from preflight.model import World
from preflight.probes import session as ses
from preflight.probes.timing import ProbeTimeout, timed_loop
from tests.helpers.fake_cuda import EIGHT_GPUS, ONE_PER_TASK, TWO_OF_EIGHT, FakeCuda, FakeWork

GPU0 = torch.device("cuda", 0)


def world(rank: int, local_rank: int, local_world_size: int = 8, world_size: int = 8) -> World:
    return World(launcher="slurm", rank=rank, world_size=world_size, local_rank=local_rank,
                 local_world_size=local_world_size, host="gpu-node-03")


def test_eight_visible_gpus_bind_local_rank() -> None:
    cuda = FakeCuda(EIGHT_GPUS)
    bound = ses.bind_device(world(5, 5), cuda)
    assert bound.index == 5 and cuda.current == 5
    assert bound.pci_bus_id == "00000000:AB:00.0" and bound.uuid.startswith("GPU-0000")


def test_one_visible_gpu_per_task_binds_device_zero_on_every_local_rank() -> None:
    for task in range(8):
        cuda = FakeCuda(ONE_PER_TASK[task])
        bound = ses.bind_device(world(task, task), cuda)
        assert bound.index == 0 and cuda.current == 0
        assert bound.uuid == f"GPU-0000{task:04d}-1111-2222-3333-444444444444"


def test_ambiguous_visibility_is_an_error_naming_rank_host_devices_and_local_rank(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(ses.BindError) as err:
        ses.bind_device(world(6, 6), FakeCuda(TWO_OF_EIGHT))
    text = str(err.value)
    assert all(part in text for part in ("rank 6", "gpu-node-03", "LOCAL_RANK=6", "CUDA_VISIBLE_DEVICES=4,5",
                                         "2 devices visible"))


def test_a_lost_gpu_is_an_error_naming_the_device() -> None:
    with pytest.raises(ses.BindError, match="device 3 failed: RuntimeError: CUDA error: GPU is lost"):
        ses.bind_device(world(3, 3), FakeCuda(EIGHT_GPUS, lost={3}))


def _vote(cudas: dict[int, FakeCuda]) -> dict[int, ses.BackendChoice]:
    """Every rank runs decide_backend("auto") at once on one store, as the ranks of a job do."""
    store = dist.HashStore()
    out: dict[int, ses.BackendChoice] = {}

    def one(rank: int) -> None:
        out[rank] = ses.decide_backend("auto", world(rank, rank, world_size=len(cudas)), store, 10.0, cudas[rank])

    threads = [threading.Thread(target=one, args=(r,)) for r in cudas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return out


def test_auto_is_nccl_when_each_task_sees_exactly_one_gpu() -> None:
    choices = _vote({task: FakeCuda(ONE_PER_TASK[task]) for task in range(8)})
    assert {c.backend for c in choices.values()} == {"nccl"}


def test_auto_falls_back_to_gloo_saying_which_rank_and_why() -> None:
    cudas = {task: FakeCuda(ONE_PER_TASK[task]) for task in range(4)}
    cudas[2] = FakeCuda(ONE_PER_TASK[2], lost={0})
    choices = _vote(cudas)
    assert {c.backend for c in choices.values()} == {"gloo"}
    reason = choices[0].reason
    assert "1 of 4 rank(s)" in reason and "rank 2" in reason and "GPU is lost" in reason


def test_device_id_is_passed_where_init_process_group_takes_it() -> None:
    bound = ses.BoundDevice(0, "H100", "00000000:18:00.0", "GPU-1")

    def new_init(backend=None, *, device_id=None, timeout=None) -> None: ...
    def old_init(backend=None, *, timeout=None) -> None: ...

    kwargs = ses.init_kwargs("nccl", bound, 30.0, new_init)
    assert str(kwargs["device_id"]) == "cuda:0" and kwargs["timeout"] == timedelta(seconds=35)
    assert "device_id" not in ses.init_kwargs("nccl", bound, 30.0, old_init)
    assert "device_id" not in ses.init_kwargs("gloo", None, 30.0, new_init)


def test_probe_process_groups_keep_the_process_and_never_block_past_the_deadline(monkeypatch) -> None:
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")  # the user's (kills the process on a timeout)
    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "1")  # would block Work.wait() until the PG timeout
    monkeypatch.setenv("NCCL_BLOCKING_WAIT", "1")
    with ses.probe_nccl_env():
        assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"  # clean up only: the process stays
        assert os.environ["TORCH_NCCL_BLOCKING_WAIT"] == "0" and "NCCL_BLOCKING_WAIT" not in os.environ
        assert os.environ["TORCH_NCCL_ENABLE_MONITORING"] == "0"  # its heartbeat kill would pre-empt the report
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3" and os.environ["TORCH_NCCL_BLOCKING_WAIT"] == "1"
    assert os.environ["NCCL_BLOCKING_WAIT"] == "1"


def test_gpu_timing_queues_every_iteration_and_synchronises_once() -> None:
    cuda = FakeCuda(EIGHT_GPUS)
    per_op = 0.0012  # a 256 MiB all_reduce on 8 H100s
    times = timed_loop(lambda: [FakeWork(cuda, per_op)], 20, time.monotonic() + 5, GPU0, cuda=cuda)
    assert times == [pytest.approx(per_op)]
    assert len(cuda.events) == 2 and cuda.stream_waits == 20  # no host wait in between
    assert set(cuda.queried) == {cuda.events[-1]} and cuda.queries > 1  # one event polled until the GPU is done


def test_gpu_timing_per_iteration_is_an_option() -> None:
    cuda = FakeCuda(EIGHT_GPUS)
    times = timed_loop(lambda: [FakeWork(cuda, 0.001)], 5, time.monotonic() + 5, GPU0, cuda=cuda,
                       per_iteration=True)
    assert times == [pytest.approx(0.001)] * 5 and set(cuda.queried) == {cuda.events[-1]}


def test_a_hung_gpu_collective_ends_at_the_deadline() -> None:
    cuda = FakeCuda(EIGHT_GPUS, stuck=True)
    started = time.monotonic()
    with pytest.raises(ProbeTimeout):
        timed_loop(lambda: [FakeWork(cuda, 0.001)], 3, started + 0.5, GPU0, cuda=cuda)
    assert time.monotonic() - started < 1.5


def test_cpu_timing_is_one_figure_over_the_whole_loop() -> None:
    calls: list[float] = []

    def start() -> list[None]:
        calls.append(time.perf_counter())
        time.sleep(0.01)
        return [None]

    (figure,) = timed_loop(start, 4, time.monotonic() + 5, "cpu")
    assert len(calls) == 4 and 0.009 < figure < 0.05
    assert len(timed_loop(start, 3, time.monotonic() + 5, "cpu", per_iteration=True)) == 3
