"""The CUDA model's memory account (tests/helpers/fake_cuda_tensors.py) against what CUDA and torch document:
every operation on CUDA tensors makes its results on their device (torch: "the result is on the same device as
the inputs"), a view shares its base's memory (torch's tensor views: no copy), the caching allocator keeps freed
blocks reserved until empty_cache() (torch.cuda.memory_reserved), tensors of two devices in one operation raise
("Expected all tensors to be on the same device"), and an allocation beyond free memory is CUDA's out of memory."""

from __future__ import annotations

import gc

import pytest
import torch

from tests.helpers.fake_cuda import FakeCuda, gpu

MIB = 2**20


def test_results_of_operations_are_allocated_on_the_inputs_device_and_views_are_not() -> None:
    model = FakeCuda([gpu(0), gpu(1)])
    with model.install():
        a = torch.ones(MIB // 4, device="cuda:1")  # 1 MiB of float32
        assert model.memory_allocated(1) == MIB and model.memory_allocated(0) == 0
        view = a[: MIB // 8]
        flat = a.view(-1)
        assert model.memory_allocated(1) == MIB  # views: no memory of their own
        both = torch.cat([a, a])  # 2 MiB more
        mask = a != 1  # 256 Ki bools
        tiled = view.repeat(4)  # 2 MiB
        assert model.memory_allocated(1) == MIB + 2 * MIB + MIB // 4 + 2 * MIB
        assert model.memory_allocated(0) == 0 and model.on_other_devices(1) == []
        del a, both, mask, tiled, flat
        gc.collect()
        assert model.memory_allocated(1) == MIB  # `view` still holds its base's storage
        del view
        gc.collect()
        assert model.memory_allocated(1) == 0 and model.memory_reserved(1) == 5 * MIB + MIB // 4  # cached
        model.empty_cache()
        assert model.memory_reserved(1) == 0


def test_two_devices_in_one_operation_raise_and_a_copy_between_them_is_counted_on_the_target() -> None:
    model = FakeCuda([gpu(0), gpu(1)])
    with model.install():
        a, b = torch.ones(16, device="cuda:0"), torch.ones(16, device="cuda:1")
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            a + b
        moved = a.to("cuda:1")
        assert model.memory_allocated(1) == 2 * 64 and bool(torch.equal(moved + b, 2 * b))
        host = moved.to("cpu")
        assert type(host) is torch.Tensor and model.memory_allocated(1) == 2 * 64  # a host copy: not the GPU's
        b.copy_(a)  # in place: nothing new
        assert model.memory_allocated(1) == 2 * 64


def test_an_operation_beyond_free_memory_is_cudas_out_of_memory() -> None:
    model = FakeCuda([gpu(0, free=3 * MIB)])
    with model.install():
        a = torch.zeros(MIB // 4, device="cuda:0")
        b = a + 1
        with pytest.raises(RuntimeError, match="CUDA out of memory"):
            torch.cat([a, b])  # 2 MiB more on a GPU with 1 MiB left


def test_a_threads_first_product_keeps_a_cublas_workspace_until_torch_clears_them() -> None:
    """torch keeps a cuBLAS workspace per handle (thread) and stream past the thread's end; empty_cache cannot
    free it until torch._C._cuda_clearCublasWorkspaces(); the process's first product keeps one block for good
    (as an H200 under torch 2.11 showed: 34 MiB left by a thread's products, 2 MiB once cleared)."""
    import threading

    model = FakeCuda([gpu(0)])
    with model.install():
        a = torch.ones(64, 64, device="cuda:0")
        worker = threading.Thread(target=lambda t: t @ t, args=(a,))
        worker.start()
        worker.join()
        a @ a  # this thread's handle: a second workspace, no second kept block
        del a
        gc.collect()
        model.empty_cache()
        kept = model.blas_first_product_bytes
        assert model.memory_reserved(0) == kept + 2 * model.blas_workspace_bytes
        torch._C._cuda_clearCublasWorkspaces()
        model.empty_cache()
        assert model.memory_reserved(0) == model.memory_allocated(0) == kept
    assert not hasattr(torch._C, "_cuda_clearCublasWorkspaces") or torch.cuda.is_available()  # put back as found


def test_threads_making_their_first_products_at_once_keep_the_process_block_once(monkeypatch) -> None:
    """The block torch keeps from the process's first product is one per device however many threads race to
    it: the model marks the device under its lock before it allocates (here made slow, so both threads are
    inside at once)."""
    import threading
    import time

    model = FakeCuda([gpu(0)])
    allocate = model.allocate

    def slow_allocate(index: int, nbytes: int) -> int:
        if nbytes == model.blas_first_product_bytes:
            time.sleep(0.05)  # the other thread's product reaches the same point meanwhile
        return allocate(index, nbytes)

    monkeypatch.setattr(model, "allocate", slow_allocate)
    with model.install():
        a = torch.ones(64, 64, device="cuda:0")
        start = threading.Barrier(2)

        def product(t: torch.Tensor) -> None:
            start.wait()
            t @ t

        workers = [threading.Thread(target=product, args=(a,)) for _ in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        del a
        gc.collect()
        model.empty_cache()
        assert model.memory_reserved(0) == model.blas_first_product_bytes + 2 * model.blas_workspace_bytes
