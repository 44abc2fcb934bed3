"""Bandwidth formulas against hand-computed numbers, and verification of known results."""

from __future__ import annotations

import pytest
import torch

from preflight.probes import ops


def test_bus_factors_per_nccl_tests() -> None:
    assert ops.bus_factor("all_reduce", 8) == pytest.approx(14 / 8)
    assert ops.bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert ops.bus_factor("reduce_scatter", 2) == pytest.approx(0.5)
    assert ops.bus_factor("all_to_all", 8) == pytest.approx(7 / 8)
    assert ops.bus_factor("broadcast", 8) == 1.0
    assert ops.bus_factor("send_recv", 2) == 1.0


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"])
def test_a_group_of_one_rank_has_no_bus_bandwidth(op: str) -> None:
    # Seen on an H100: a one-rank broadcast of 256 MiB "ran" at 6,690 GB/s, a local no-op.
    assert ops.busbw_gbps(op, 1, 256 << 20, 40e-6) == 0.0
    with pytest.raises(ValueError):
        ops.bus_factor("gather", 1)


def test_bandwidth_hand_computed() -> None:
    # 256 MB in 10 ms = 25.6 GB/s; all_reduce on 8 ranks: x 1.75 = 44.8 GB/s
    assert ops.algbw_gbps(256_000_000, 0.010) == pytest.approx(25.6)
    assert ops.busbw_gbps("all_reduce", 8, 256_000_000, 0.010) == pytest.approx(44.8)
    # all_to_all 1 GB on 4 ranks in 0.5 s: algbw 2 GB/s, busbw 1.5 GB/s
    assert ops.busbw_gbps("all_to_all", 4, 10**9, 0.5) == pytest.approx(1.5)
    assert ops.busbw_gbps("broadcast", 16, 10**9, 0.25) == pytest.approx(4.0)


def test_byte_counts_round_to_whole_chunks() -> None:
    assert ops.element_counts("all_reduce", 1000, 4, 4) == (250, 1000)
    assert ops.element_counts("all_gather", 1000, 3, 4) == (83, 996)  # output = 3 chunks of 83 floats
    assert ops.element_counts("all_to_all", 1 << 20, 8, 2) == (65536, 1 << 20)


def _simulate(op: str, n: int, corrupt: int | None = None) -> list[tuple[bool, list[int]]]:
    """Run the op's arithmetic by hand over n buffer sets (no process group) and verify each."""
    bufs = [ops.make_buffers(op, 64 * 4 * n, me, n, torch.float32, "cpu") for me in range(n)]
    if corrupt is not None:
        bufs[corrupt].send.mul_(-1)
    chunk = bufs[0].chunk
    if op == "all_reduce":
        total = sum(b.send for b in bufs)
        for b in bufs:
            b.send.copy_(total)
    elif op == "all_to_all":
        for k, b in enumerate(bufs):
            b.recv.copy_(torch.cat([bufs[i].send[k * chunk:(k + 1) * chunk] for i in range(n)]))
    return [ops.verify(b, me, n) for me, b in enumerate(bufs)]


@pytest.mark.parametrize("op", ["all_reduce", "all_to_all"])
def test_verification_names_the_corrupting_rank(op: str) -> None:
    assert all(ok and not bad for ok, bad in _simulate(op, 4))
    outcome = _simulate(op, 4, corrupt=2)
    assert {r for ok, bad in outcome for r in bad} == {2}
    assert not any(ok for ok, _ in outcome if op == "all_reduce")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("size", [4, 796, 800, 4100, 1 << 16])
def test_every_input_is_its_documented_value_element_by_element(dtype: torch.dtype, n: int, size: int) -> None:
    """The inputs are tiled from one period (not a modulo per element): every element is still the
    documented value, at sizes that are and are not whole periods (200, n)."""
    for me in range(n):
        for op in ops.NAMES:
            b = ops.make_buffers(op, size, me, n, dtype, "cpu")
            assert b.send.is_contiguous() and b.recv.is_contiguous()
            send = b.send.float().tolist()
            if op in ("all_reduce", "reduce_scatter"):  # element j is 1 on its owner, (-j) mod n, only
                assert send == [1.0 if (j + me) % n == 0 else 0.0 for j in range(len(send))], (op, me)
            elif op == "all_to_all":  # chunk k is the pattern of offset 7 me + 3 k
                assert send == [float((j % b.chunk + 7 * me + 3 * (j // b.chunk)) % 200 + 1)
                                for j in range(b.chunk * n)], (op, me)
            elif op != "broadcast" or me == 0:
                offset = me if op in ("all_gather", "send_recv") else 0
                assert send == [float((j + offset) % 200 + 1) for j in range(b.chunk)], (op, me)


def test_verification_builds_its_expected_values_on_the_buffers_own_gpu() -> None:
    """A bare "cuda" would be this thread's current device (0 in a helper thread): the expected chunks of
    GPU 3's all_gather are made on cuda:3 by name (the CUDA model records where each tensor went)."""
    from types import SimpleNamespace

    from tests.helpers.fake_cuda import FakeCuda, gpu

    n, chunk = 2, 300
    recv = torch.cat([ops._pattern(src, chunk, torch.float32, "cpu") for src in range(n)])
    model = FakeCuda([gpu(i) for i in range(8)])
    with model.install():  # the buffers' device as a GPU rank's: cuda:3 (their values held on the CPU)
        send = SimpleNamespace(dtype=torch.float32, device=torch.device("cuda", 3))
        ok, bad = ops.verify(ops.Buffers("all_gather", send, recv, chunk, chunk * 4), 0, n)  # type: ignore[arg-type]
    assert ok and bad == []
    assert model.calls and model.on_other_devices(3) == []


@pytest.mark.parametrize("op", sorted(ops.HELD_ELEMENTS))
@pytest.mark.parametrize("n", [1, 3, 8])
def test_held_bytes_is_what_make_buffers_allocates(op: str, n: int) -> None:
    """probes/memory_fit.py sizes a step by held_bytes before allocating it: the two must agree."""
    b = ops.make_buffers(op, 4 * 2**20 + 6, n - 1, n, torch.bfloat16, "cpu")
    real = b.send.numel() * 2 + (0 if b.recv is b.send else b.recv.numel() * 2)
    assert ops.held_bytes(op, 4 * 2**20 + 6, n, torch.bfloat16) == real


@pytest.mark.parametrize("op", sorted(ops.HELD_ELEMENTS))
def test_every_buffer_a_step_makes_is_counted_on_its_gpu_within_its_sizing(op: str) -> None:
    """The CUDA model counts every allocation an operation on CUDA tensors makes (torch.cat, repeat, a
    comparison's mask, ...; tests/helpers/fake_cuda_tensors.py), on the buffers' GPU: a step's send and receive
    buffers are all in the account while they live (this fails if one were not counted), the peak of making
    and verifying them stays within memory_fit.step_bytes (what a step is skipped by, BW014), and all of it
    is given back when they are gone."""
    import gc

    from preflight.probes import memory_fit
    from tests.helpers.fake_cuda import FakeCuda, gpu

    n, size = 4, 4 * 2**20
    model = FakeCuda([gpu(i) for i in range(4)])
    with model.install():
        b = ops.make_buffers(op, size, 1, n, torch.float32, "cuda:3")
        storages = {b.send.untyped_storage().data_ptr(): b.send.untyped_storage().nbytes(),
                    b.recv.untyped_storage().data_ptr(): b.recv.untyped_storage().nbytes()}
        assert model.memory_allocated(3) >= sum(storages.values()) >= ops.held_bytes(op, size, n, torch.float32)
        ops.verify(b, 1, n)
        peak = model.memory_reserved(3)
        del b
        gc.collect()
        assert model.memory_allocated(3) == 0
    assert peak <= memory_fit.step_bytes(op, size, n, torch.float32), (peak, op)
    assert model.on_other_devices(3) == [] and model.allocated[:3] == [0, 0, 0]


def test_a_step_larger_than_the_gpus_free_memory_is_cudas_out_of_memory() -> None:
    """all_to_all at 4 MiB in a group of 4 holds 8 MiB of buffers: on a GPU with 6 MiB free, making them raises
    CUDA's out-of-memory error in the model as on a GPU (torch.cat's result and the receive buffer counted)."""
    from tests.helpers.fake_cuda import FakeCuda, gpu

    model = FakeCuda([gpu(0, free=6 * 2**20)])
    with model.install(), pytest.raises(RuntimeError, match="CUDA out of memory"):
        ops.make_buffers("all_to_all", 4 * 2**20, 1, 4, torch.float32, "cuda:0")
