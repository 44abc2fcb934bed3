"""The CUDA model's rules of time, each against what CUDA documents (CUDA Runtime API, Event Management):

- cudaEventQuery: cudaSuccess once the device has completed all work captured by the event, else
  cudaErrorNotReady; an event never recorded is cudaSuccess;
- cudaEventElapsedTime: cudaErrorNotReady if either event has not completed yet (torch checks first and
  says "Both events must be completed before calculating elapsed time.", as seen on an H200);
  cudaErrorInvalidResourceHandle if either was not recorded or was made with cudaEventDisableTiming;
- cudaEventSynchronize / cudaDeviceSynchronize: return once that work is done;
- ProcessGroupNCCL: the collective runs on the communicator's stream, and Work.wait() makes the
  current stream wait on it (the host does not).

And the reason the model is strict: code that reads a time before the GPU is done now fails in a test.
"""

from __future__ import annotations

import inspect
import textwrap

import pytest

from preflight.probes.device import boundary
from preflight.probes.device.boundary import TorchDevice
from tests.helpers.fake_cuda import FakeCuda, FakeWork, gpu


def queued(model: FakeCuda, seconds: float) -> None:
    """`seconds` of matrix work queued on device 0's stream (rates: 1 TFLOP/s)."""
    model.kernel(0, "gemm", seconds * 1e12)


def test_an_event_is_incomplete_until_the_work_before_it_is_done() -> None:
    model = FakeCuda([gpu(0)])
    start, end = model.Event(enable_timing=True), model.Event(enable_timing=True)
    assert end.query()  # never recorded: complete, as CUDA says
    start.record()
    queued(model, 0.5)
    end.record()
    assert not end.query()  # the GPU has not done half a second of work yet
    with pytest.raises(RuntimeError, match="must be completed"):
        start.elapsed_time(end)
    end.synchronize()
    assert end.query() and start.elapsed_time(end) == pytest.approx(500.0)


def test_polling_lets_the_device_finish_and_a_device_synchronize_completes_everything() -> None:
    model = FakeCuda([gpu(0)])
    end = model.Event(enable_timing=True)
    queued(model, 0.2)
    end.record()
    polls = 1
    while not end.query():
        polls += 1
        assert polls < 10_000
    assert polls > 1
    later = model.Event(enable_timing=True)
    queued(model, 0.2)
    later.record()
    model.synchronize(0)
    assert later.query()


def test_elapsed_time_needs_two_recorded_timing_events() -> None:
    model = FakeCuda([gpu(0)])
    timing, plain, never = model.Event(enable_timing=True), model.Event(), model.Event(enable_timing=True)
    timing.record()
    plain.record()
    model.synchronize(0)
    with pytest.raises(RuntimeError, match="invalid resource handle"):
        timing.elapsed_time(plain)  # made without timing
    with pytest.raises(RuntimeError, match="invalid resource handle"):
        timing.elapsed_time(never)  # never recorded


def test_a_collective_counts_on_the_callers_stream_only_once_waited_on() -> None:
    model = FakeCuda([gpu(0)])
    start, unwaited, waited = (model.Event(enable_timing=True) for _ in range(3))
    start.record()
    work = FakeWork(model, 0.3)
    unwaited.record()  # the collective runs on the communicator's stream: not in this one yet
    work.wait()
    waited.record()
    model.synchronize(0)
    assert start.elapsed_time(unwaited) == 0.0 and start.elapsed_time(waited) == pytest.approx(300.0)


def test_deleting_the_synchronize_before_elapsed_time_now_fails() -> None:
    """A mutant of TorchDevice.burst without its `end.synchronize()`: the model refuses its elapsed_time, as
    CUDA would (before, the model's events were always complete and the mutant passed)."""
    source = textwrap.dedent(inspect.getsource(TorchDevice.burst))
    assert "end.synchronize()" in source
    namespace: dict[str, object] = {}
    exec(compile(source.replace("end.synchronize()", "pass"), "mutant", "exec"), vars(boundary), namespace)
    mutant = namespace["burst"]
    model = FakeCuda([gpu(0)])
    device = TorchDevice("cuda", 0, cuda=model)

    def work() -> None:
        queued(model, 0.01)

    assert device.burst(work, 3) == pytest.approx(0.03)  # the real one: synchronised, then read
    with pytest.raises(RuntimeError, match="must be completed"):
        mutant(device, work, 3)  # type: ignore[operator]


def test_the_current_stream_belongs_to_the_thread_and_events_time_only_their_streams_work() -> None:
    """torch.cuda.current_stream is per thread (a thread that selected a stream does not change another's),
    and an event times the work of the stream it was recorded on, not a side stream's."""
    import threading

    model = FakeCuda([gpu(0)])
    side = model.Stream(0)
    seen: list[object] = []
    with model.stream(side):
        assert model.current_stream(0) is side
        worker = threading.Thread(target=lambda: seen.append(model.current_stream(0)))
        worker.start()
        worker.join()
        start, end = model.Event(enable_timing=True), model.Event(enable_timing=True)
        start.record(model.default_streams[0])
        queued(model, 0.4)  # on the side stream, this thread's current one
        end.record(model.default_streams[0])
    assert seen == [model.default_streams[0]] and model.current_stream(0) is model.default_streams[0]
    model.synchronize(0)
    assert start.elapsed_time(end) == 0.0  # the default stream had nothing to do


def test_a_device_the_process_touches_pays_for_a_context() -> None:
    """CUDA 12: the first runtime call that uses a device (cudaSetDevice included) creates its primary
    context, which takes device memory; a device never used has none."""
    model = FakeCuda([gpu(i, free=4 * 2**30) for i in range(2)], context_bytes=500 * 2**20)
    model.set_device(1)
    assert model.contexts == {1}
    assert model.mem_get_info(1)[0] == 4 * 2**30 - 500 * 2**20
    with pytest.raises(RuntimeError, match="out of memory"):
        model.allocate(1, 4 * 2**30 - 400 * 2**20)  # fits the device, not beside the context
