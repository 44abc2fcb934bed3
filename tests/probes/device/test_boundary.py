"""The real device boundary (TorchDevice) where a GPU is not needed: its NVML side, on the NVML replay FAKE
(PREFLIGHT_NVML_REPLAY, docs/testing.md) and the CUDA model (tests/helpers/fake_cuda.py)."""

from __future__ import annotations

import threading
import time

import pytest

from preflight.model.device_probe import DeviceReport, HostLink
from preflight.probes.device.boundary import open_device
from tests.helpers.fake_cuda import FakeCuda, gpu

UUID_3 = "GPU-5a1e0000-0000-4000-8000-000000000003"  # NVML index 3 of the fixture


@pytest.fixture
def replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFLIGHT_NVML_REPLAY", "tests/fixtures/nvml/healthy_h100x8.json")


def test_without_a_bus_id_the_gpu_is_found_by_uuid_and_nvml_is_shut_down_after(replayed: None) -> None:
    device = open_device("cuda", 3, pci_bus_id="", cuda=FakeCuda([gpu(i) for i in range(8)]), uuid=UUID_3)
    assert device.nvml is not None and device.nvml_handle is not None
    assert device.nvml.read(device.nvml_handle, "uuid") == UUID_3
    device.close()
    assert device.nvml is None and device.nvml_handle is None


def test_nvml_is_read_while_the_bursts_run_and_the_sampler_stops_after(replayed: None) -> None:
    device = open_device("cuda", 3, pci_bus_id="00000000:5D:00.0", cuda=FakeCuda([gpu(i) for i in range(8)]))
    report = DeviceReport(0, "n", "cuda")
    with device.sampling(report, time.monotonic()):
        device.figure = "gemm_bf16"  # a matrix burst under way
        time.sleep(0.5)
        during = len(report.samples)
        device.figure = "h2d"  # then a host copy
        time.sleep(0.3)
    assert during >= 3 and report.samples[0].clock_event_reasons == 1 and report.samples[0].temperature_c == 34
    assert report.link == HostLink(5, 16, 5, 16)
    assert "preflight-nvml-sampler" not in {t.name for t in threading.enumerate()}
    count = len(report.samples)
    time.sleep(0.2)
    assert len(report.samples) == count  # nothing read once the block ended
    device.close()


def test_the_host_copies_pinned_memory_goes_back_when_the_device_closes() -> None:
    """torch's host caching allocator keeps freed pinned blocks (2 x the host-copy size here), and
    torch.cuda.empty_cache does not touch them: close() gives them back."""
    from preflight.lib.pci_topology import PciPlace
    from preflight.probes.device.boundary import TorchDevice
    from preflight.probes.device.family import Sizes, run_family

    model = FakeCuda([gpu(0)], rates={"gemm": 0.5, "copy": 50.0, "host": 10.0})
    with model.install():
        device = TorchDevice("cuda", 0, place=PciPlace("0000:10:00.0", None), host=f"pin{time.monotonic_ns()}")
        report = run_family(device, DeviceReport(0, "n", "cuda"), budget_s=0.05,
                            sizes=Sizes(gemm_n=64, copy_bytes=2**20, host_bytes=2**20, sdc_n=64))
        cached = model.pinned_reserved
        device.close()
    assert {"h2d", "d2h"} <= {m.name for m in report.measured} and report.errors == {}
    assert model.pinned_allocated == 0 and cached >= 2 * 2**20  # the tensors are gone, their pages cached
    # the family's thread's cuBLAS workspace went too: only the first product's kept block stays
    assert model.pinned_reserved == 0 and model.reserved == [model.blas_first_product_bytes]


def test_the_ranks_of_a_machine_measure_cpu_figures_in_turns(tmp_path) -> None:
    """On CPU every figure takes the machine's CPU turn (one device shared by its ranks): while one rank
    holds it, another rank of the same job on the machine waits, under another hostname too (a container's,
    a netns host's); another job's rank, or another machine's, does not."""
    def device(host: str, job: str):
        return open_device("cpu", None, host=host, job=job)

    holder, waiting = device("h1", "job-a"), device("h2", "job-a")  # two hostnames, one kernel
    elsewhere, other_job = device("h3", "job-a"), device("h1", "job-b")
    assert holder.machine and holder.machine == waiting.machine  # this kernel's boot id
    elsewhere.machine = "another-boot-id"  # a device opened on another machine
    entered = threading.Event()
    with holder.figure_turn("copy"):
        def take() -> None:
            with waiting.figure_turn("gemm_fp32"):
                entered.set()
        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        assert not entered.wait(0.5)  # same job, same machine: waits for the turn
        for free in (elsewhere, other_job):
            with free.figure_turn("copy"):  # would block (and hang the test) if it shared the turn
                pass
    assert entered.wait(60)  # a does-not-hang bound: the turn passed on when the holder's ended
    thread.join(60)


def test_a_cpu_device_without_a_job_takes_no_turn() -> None:
    bare = open_device("cpu", None)
    with bare.figure_turn("copy"), bare.figure_turn("copy"):  # no lock: the same thread twice does not block
        pass
