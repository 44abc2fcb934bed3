"""The one boundary between the device probes and the device: torch on CPU or on the bound CUDA GPU.

Everything the device family does to a device goes through a `Device` (family.py only
asks it): make deterministic operands, run a burst of back-to-back calls and time it with one
synchronisation (CUDA events on a GPU, the monotonic clock on CPU), pinned host buffers, the
result's digest, and NVML reads of the bound GPU (PCIe link, serial, clocks under load).

`TorchDevice` is the real one. The CUDA-only parts (events, pinned copies, NVML sampling) exist
only where a GPU does; tests replay them with a data-driven FAKE at this same boundary
(tests/helpers/fake_device.py), never by patching the family.

The matrix product is `torch.matmul`, the public entry point a user's own code calls, so that
a fault planted from outside (a wrapped torch.matmul, a sitecustomize) is measured as it would
slow or corrupt a training step.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from preflight.lib import host_turns, loaded_libraries, pci_topology
from preflight.lib.pci_topology import PciPlace
from preflight.model.device_probe import LINK_FIGURES, HostLink, NvmlSample

SDC_SEED = 1234
SAMPLE_EVERY_S = 0.05  # NVML while the bursts run: ~20 samples a second
MAX_SAMPLES = 400  # a bounded report, however long the family runs


def cpu_model() -> str:
    """The CPU model as /proc/cpuinfo names it (platform's answer elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()[:120]
    except OSError:
        pass
    return platform.processor()[:120] or "cpu"


@contextlib.contextmanager
def tf32_allowed(torch: Any, allowed: bool) -> Iterator[None]:
    """cuBLAS fp32 products with TF32 allowed or not, and the trainer's setting back after, through the
    API this torch has. On torch >= 2.9 (`fp32_precision`) the legacy `allow_tf32` is never touched:
    reading it after a trainer set the new API raises ("mix of the legacy and new APIs"), and
    writing it turns the new API's "none" into "ieee"."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        saved = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if allowed else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = saved
        return
    saved_legacy = matmul.allow_tf32
    matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        matmul.allow_tf32 = saved_legacy


def release_pinned(torch: Any) -> None:
    """Cached pinned host memory back to the OS: torch.accelerator.empty_host_cache where this torch has it
    (2.8 and later), its private predecessor otherwise; nothing where neither exists."""
    release = getattr(getattr(torch, "accelerator", None), "empty_host_cache", None) or \
        getattr(torch._C, "_host_emptyCache", None)
    if release is not None:
        with contextlib.suppress(Exception):
            release()


def release_blas_workspaces(torch: Any) -> None:
    """torch's cuBLAS workspaces back to the caching allocator (torch._C._cuda_clearCublasWorkspaces).

    torch keeps one workspace (32 MiB on an H200, torch 2.11) per cuBLAS handle and stream, past the
    end of the thread whose handle it was, and empty_cache cannot free it while the map holds it:
    the family's thread left 34 MiB reserved in the trainer's process (that workspace, and a 2 MiB
    block the process's first product keeps, which nothing frees). The map is torch's, one for the
    process, so the trainer's own workspaces go too; torch makes them again at its next product,
    as it does after every CUDA graph capture, which clears the same map."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        with contextlib.suppress(Exception):
            clear()


class TorchDevice:
    """This rank's device as torch drives it: "cpu", or the CUDA ordinal the session bound."""

    def __init__(self, kind: str, index: int | None = None, cuda: Any = None, nvml: Any = None,
                 nvml_handle: Any = None, place: PciPlace | None = None, sysfs_root: str = "/sys",
                 host: str = "", job: str = "") -> None:
        import torch

        self.torch = torch
        self.kind = kind
        self.index = index
        self.cuda = cuda if cuda is not None else (torch.cuda if kind == "cuda" else None)
        self.nvml, self.nvml_handle = nvml, nvml_handle
        self.figure = ""  # the figure being measured now (the NVML sampler reads it)
        self.place = place or PciPlace()  # the PCIe switch it shares and its NUMA node (lib/pci_topology.py)
        self.sysfs_root, self.host = sysfs_root, host
        self.job = job  # the job's identity (lib/host_turns.job_identity): whose turns these are
        self.machine = host_turns.machine_id()  # whose CPU this is (a hostname may be a container's)
        self.device = torch.device("cuda", index) if kind == "cuda" else torch.device("cpu")

    # ---- what the device can run ----
    def dtypes(self) -> dict[str, Any]:
        """Figure name -> dtype of the matrix products this device runs (bf16/fp16/tf32 on a GPU, fp32 on CPU)."""
        t = self.torch
        if self.kind == "cuda":
            return {"gemm_bf16": t.bfloat16, "gemm_fp16": t.float16, "gemm_tf32": t.float32}
        return {"gemm_fp32": t.float32}

    def has_host_link(self) -> bool:
        """Only a GPU has a host link to measure (pinned copies)."""
        return self.kind == "cuda"

    # ---- operands ----
    def matrices(self, n: int, dtype: Any, seed: int) -> tuple[Any, Any]:
        """Two n x n matrices from a generator seeded on the device itself (filling 8192^2 on the host
        would cost seconds): every device of one kind and software gets the same values."""
        gen = self.torch.Generator(device=self.device).manual_seed(seed)
        a = self.torch.randn(n, n, generator=gen, device=self.device).to(dtype)
        b = self.torch.randn(n, n, generator=gen, device=self.device).to(dtype)
        return a, b

    def buffers(self, nbytes: int) -> tuple[Any, Any]:
        """Destination and source of a device-to-device copy, nbytes each."""
        src = self.torch.ones(nbytes // 4, dtype=self.torch.float32, device=self.device)
        return self.torch.empty_like(src), src

    def host_buffers(self, nbytes: int) -> tuple[Any, Any]:
        """A pinned host buffer on the GPU's NUMA node (first touched by this thread while it runs on that
        node's CPUs: a remote buffer reads 20-40% lower) and a device buffer of nbytes (CUDA only)."""
        with self._on_numa_node():
            host = self.torch.ones(nbytes // 4, dtype=self.torch.float32).pin_memory()
        return host, self.torch.empty(nbytes // 4, dtype=self.torch.float32, device=self.device)

    @contextlib.contextmanager
    def _on_numa_node(self) -> Iterator[None]:
        """This thread on the GPU's NUMA node's CPUs for the block (its own affinity back after)."""
        cpus = pci_topology.node_cpus(self.place.numa, self.sysfs_root) if self.place.numa is not None else set()
        saved = os.sched_getaffinity(0) if cpus and hasattr(os, "sched_setaffinity") else set()
        usable = cpus & saved
        if not usable:
            yield
            return
        os.sched_setaffinity(0, usable)  # pid 0: the calling thread
        try:
            yield
        finally:
            os.sched_setaffinity(0, saved)

    def link_turn(self) -> contextlib.AbstractContextManager[None]:
        """The host link to this rank alone for the block: the GPUs behind one PCIe switch (every GPU of the
        host when the topology is unknown) copy to and from the host in turns, through a lock file of this
        user's job (lib/host_turns.py: 0600, gone after each turn), so a shared uplink is not measured as a
        slow one and nothing is left on the node for another user or job to trip over. The wait is bounded
        by the family's deadline (a bounded thread)."""
        return host_turns.turn(host_turns.turn_path(self.host, self.place.switch or "host", self.job))

    def figure_turn(self, figure: str) -> contextlib.AbstractContextManager[None]:
        """What this rank must have alone while it measures `figure`: a GPU's host copies take the PCIe
        uplink's turn (link_turn); on CPU every figure takes the machine's CPU turn, because the ranks of a
        machine share one device there (its cores, caches and memory), and the ranks start each figure
        together: two ranks copying at once each read a share of the memory bandwidth (DEV004 at 30% on a
        healthy 4-rank run, 1 run in 8, thread CPU time notwithstanding). The machine is the kernel's
        (host_turns.machine_id), not the hostname: containers or network namespaces on one node have
        hostnames of their own and still share its CPU. A turn is the figure's slot, milliseconds on CPU.
        No job identity (a bare device): no turns."""
        if figure in LINK_FIGURES:
            return self.link_turn()
        if self.kind != "cuda" and self.job:
            return host_turns.turn(host_turns.turn_path(self.machine or self.host, "cpu", self.job))
        return contextlib.nullcontext()

    # ---- the calls measured ----
    def matmul(self, a: Any, b: Any, tf32: bool = False) -> Any:
        """a @ b through torch.matmul (tf32 allowed only for the tf32 figure)."""
        if self.kind != "cuda":
            return self.torch.matmul(a, b)
        with tf32_allowed(self.torch, tf32):
            return self.torch.matmul(a, b)

    @staticmethod
    def copy(dst: Any, src: Any) -> None:
        """dst <- src (device to device, host to device or device to host, non-blocking where pinned)."""
        dst.copy_(src, non_blocking=True)

    # ---- the one timing loop ----
    def burst(self, call: Callable[[], Any], iters: int) -> float:
        """Seconds for `iters` back-to-back calls, one synchronisation at the end (CUDA events on a GPU,
        the thread's CPU time on CPU)."""
        if self.kind == "cuda":
            # The bound GPU's stream, named: events record on the stream they are given, and the
            # calls (tensors on self.device) queue on that device's current stream.
            stream = self.cuda.current_stream(self.device)
            start, end = self.cuda.Event(enable_timing=True), self.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(iters):
                call()
            end.record(stream)
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3
        # On CPU the clock is this thread's CPU time: the ranks of a host share its cores with each
        # other and with every other process, and a burst descheduled by them is not a slow device.
        began = time.thread_time()
        for _ in range(iters):
            call()
        return time.thread_time() - began

    def synchronize(self) -> None:
        """Wait for the device's queued work."""
        if self.kind == "cuda":
            self.cuda.synchronize(self.device)

    # ---- correctness ----
    def digest(self, tensor: Any) -> tuple[str, list[float]]:
        """sha256 of the result's bytes, and its row-block sums (8 figures, for a tolerance comparison)."""
        host = tensor.detach().to("cpu").contiguous()
        blocks = host.float().reshape(8, -1).sum(dim=1).tolist()
        # The bytes straight from the tensor's memory: numpy is no dependency of preflight (nor of torch).
        raw = ctypes.string_at(host.data_ptr(), host.numel() * host.element_size())
        return hashlib.sha256(raw).hexdigest()[:32], [float(v) for v in blocks]

    def digest_key(self) -> tuple[str, str]:
        """(what must match for two devices' digests to be compared, why none may be), e.g.
        ("cuBLAS 12.8.4 sm_90 132 SMs", ""): the cuBLAS the process loaded, asked through its own
        cublasGetProperty (lib/loaded_libraries.py), else the CUDA version torch was built for.
        Under ROCm's TunableOp each rank picks its own kernels:
        no comparison ("", the reason)."""
        if self.kind != "cuda":
            return "", ""
        tunable = getattr(self.cuda, "tunable", None)
        if tunable is not None and getattr(tunable, "is_enabled", lambda: False)():
            return "", "TunableOp is on: each rank picks its own kernels, so equal bits are not promised"
        props = self.cuda.get_device_properties(self.device)
        blas = "hipBLASLt" if getattr(self.torch.version, "hip", None) else "cuBLAS"
        version = ""
        if blas == "cuBLAS":  # the libcublas this process loaded (pip, conda, LD_LIBRARY_PATH), by its own call
            version = loaded_libraries.loaded().get("cublas", loaded_libraries.Loaded("", "", "")).version
        with contextlib.suppress(Exception):
            if not version:  # not readable: the version torch was compiled against, said to be only that
                version = (f"built for CUDA {self.torch._C._cuda_getCompiledVersion()}" if blas == "cuBLAS"
                           else str(self.torch.version.hip))
        with contextlib.suppress(Exception):
            version = str(self.torch.backends.cuda.preferred_blas_library()) + " " + version
        return (f"{blas} {version.strip()} sm_{getattr(props, 'major', '?')}{getattr(props, 'minor', '?')} "
                f"{getattr(props, 'multi_processor_count', '?')} SMs"), ""

    def free_bytes(self) -> int | None:
        """Free memory on the bound GPU now (None on CPU: the family's CPU sizes are small)."""
        if self.kind != "cuda":
            return None
        return int(self.cuda.mem_get_info(self.device)[0])

    def close(self) -> None:
        """Give back what the family held: torch's cuBLAS workspaces its products made, the caching
        allocator's blocks it reserved (its tensors are gone by now), the pinned host memory of its
        host copies (torch's host caching allocator keeps it after the tensors are freed, and
        empty_cache does not touch it) and the NVML reference."""
        if self.kind == "cuda":
            release_blas_workspaces(self.torch)  # before empty_cache, which can then free them
            self.cuda.empty_cache()
            release_pinned(self.torch)
        if self.nvml is not None:
            with contextlib.suppress(Exception):
                self.nvml.shutdown()
            self.nvml = self.nvml_handle = None

    # ---- NVML (CUDA only) ----
    def nvml_read(self, what: str) -> Any:
        """One read of the bound GPU through the NVML boundary (lib/nvml_source.py); None if it fails."""
        if self.nvml is None or self.nvml_handle is None:
            return None
        try:
            return self.nvml.read(self.nvml_handle, what)
        except Exception:  # NotSupported, NoPermission, a lost GPU: the sample says "unknown"
            return None

    def sample(self, t_s: float) -> NvmlSample | None:
        """SM clock, clock event reasons, temperature and power now (None without NVML)."""
        if self.nvml_handle is None:
            return None
        power = self.nvml_read("power_usage")
        return NvmlSample(t_s, self.nvml_read("sm_clock"), self.nvml_read("max_sm_clock"),
                          self.nvml_read("clock_event_reasons"), self.nvml_read("temperature"),
                          power / 1000.0 if isinstance(power, (int, float)) else None)

    @contextlib.contextmanager
    def sampling(self, report: Any, began: float, every_s: float = SAMPLE_EVERY_S,
                 limit: int = MAX_SAMPLES) -> Iterator[None]:
        """NVML read in a side thread every `every_s` while the block runs (up to `limit` samples in the
        report): clocks and throttle reasons during the matrix bursts, the PCIe link during the host copies
        (an idle link trains down). Never after a burst's synchronize: the GPU is idle then, and so are its
        clocks and power. Nothing without NVML; the thread is stopped and joined when the block ends."""
        if self.nvml_handle is None:
            yield
            return
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every_s):
                figure = self.figure
                if figure.startswith("gemm") and len(report.samples) < limit:
                    sample = self.sample(time.monotonic() - began)
                    if sample is not None:
                        report.samples.append(sample)
                elif figure in LINK_FIGURES and report.link is None:
                    report.link = self.link()

        thread = threading.Thread(target=loop, daemon=True, name="preflight-nvml-sampler")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5.0)  # an NVML call is bounded by the Nvml deadline

    def link(self) -> HostLink | None:
        """The PCIe link now (read during the host copies, when the link is up to speed)."""
        if self.nvml_handle is None:
            return None
        return HostLink(self.nvml_read("pcie_gen"), self.nvml_read("pcie_width"),
                        self.nvml_read("pcie_max_gen"), self.nvml_read("pcie_max_width"))

    def serial(self) -> str:
        """The board serial NVML reports ("" when it cannot)."""
        value = self.nvml_read("serial")
        return str(value) if value else ""


def open_device(kind: str, index: int | None, pci_bus_id: str = "", cuda: Any = None,
                deadline_s: float = 60.0, uuid: str = "", sysfs_root: str = "/sys", host: str = "",
                job: str = "") -> TorchDevice:
    """The real device of this rank, with NVML opened on its GPU where the host has NVML: matched by PCI
    bus id, or by UUID when torch gives no bus id (NVML indices are not CUDA ordinals); NVML is not
    called after deadline_s, and close() shuts it down."""
    if kind != "cuda":
        return TorchDevice("cpu", host=host, job=job)
    from preflight.lib import nvml_source

    nvml, _ = nvml_source.open_nvml(deadline_s=deadline_s)
    handle = None
    if nvml is not None and (pci_bus_id or uuid):
        try:
            for i in range(nvml.count()):
                candidate = nvml.handle(i)
                if pci_bus_id:
                    found = str(nvml.read(candidate, "pci_bus_id")).upper().endswith(pci_bus_id.upper()[-12:])
                else:
                    found = str(nvml.read(candidate, "uuid")) == uuid
                if found:
                    handle = candidate
                    break
        except Exception:
            handle = None
    return TorchDevice("cuda", index, cuda=cuda, nvml=nvml, nvml_handle=handle,
                       place=pci_topology.place(pci_bus_id, sysfs_root), sysfs_root=sysfs_root, host=host, job=job)
