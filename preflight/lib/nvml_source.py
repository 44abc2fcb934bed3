"""The one boundary to NVML: the only module of preflight that imports pynvml (nvidia-ml-py).

The gatherers ask an `Nvml` for named reads (`nvml.read(handle, "remapped_rows")`), never for
pynvml functions, so the NVML version quirks (a renamed call, a struct to pass by reference)
live here, and a test can put a data-driven fake behind the same interface:

* the real NVML: `pynvml`, loaded when the driver is there; `open_nvml` says why not
  ("NVML Shared Library Not Found" on a CPU machine) and the gatherers record it.
* **a replay FAKE, for tests only**: `PREFLIGHT_NVML_REPLAY=<file.json>` makes `open_nvml` and
  `module` answer from a fixture file (tests/fixtures/nvml/, format in docs/testing.md) instead
  of the driver (the fake itself: lib/nvml_replay.py). No GPU exists on CI machines; this is
  where their absence is faked, and nowhere else. The variable is read here only.

Every read runs under the gatherer's deadline: once `deadline_s` has passed, reads raise
NvmlError(TIMEOUT) at once instead of calling into the driver again (a gatherer that overran is
already recorded as such by steps/gather/__init__.py; this stops it from issuing more calls).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from preflight.lib.nvml_fabric import read_fabric_info

REPLAY_VARIABLE = "PREFLIGHT_NVML_REPLAY"

# nvmlReturn_t codes (nvml.h; stable ABI)
INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, TIMEOUT, GPU_IS_LOST, UNKNOWN = 2, 3, 4, 10, 15, 999
ERROR_CODES = {"INVALID_ARGUMENT": INVALID_ARGUMENT, "NOT_SUPPORTED": NOT_SUPPORTED, "NO_PERMISSION": NO_PERMISSION,
               "TIMEOUT": TIMEOUT, "GPU_IS_LOST": GPU_IS_LOST, "UNKNOWN": UNKNOWN, "DRIVER_NOT_LOADED": 9,
               "LIB_NOT_FOUND": 12}
_ERROR_TEXT = {INVALID_ARGUMENT: "Invalid Argument", NOT_SUPPORTED: "Not Supported",
               NO_PERMISSION: "Insufficient Permissions", TIMEOUT: "Timeout", GPU_IS_LOST: "GPU is lost",
               UNKNOWN: "Unknown Error", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found"}
# Reads that take a link index: past the GPU's own links (an A100 has 12, indices 0-11; an H100 18) the driver
# answers INVALID_ARGUMENT, not NOT_SUPPORTED (a GPU without NVLink answers NOT_SUPPORTED at link 0).
PER_LINK = ("nvlink_state", "nvlink_version", "nvlink_errors")


class NvmlError(Exception):
    """An NVML call failed with `code` (an nvmlReturn_t)."""

    def __init__(self, code: int, text: str = "") -> None:
        super().__init__(text or _ERROR_TEXT.get(code, f"NVML error {code}"))
        self.code = code
        self.value = code  # pynvml's NVMLError names it `value`

    @property
    def unavailable(self) -> bool:
        """NotSupported / NoPermission: a fact of this GPU or this container, not a fault."""
        return self.code in (NOT_SUPPORTED, NO_PERMISSION)

    @property
    def lost(self) -> bool:
        """GPU_IS_LOST: the GPU fell off the bus."""
        return self.code == GPU_IS_LOST


def _ecc(nv: Any, h: Any, kind: str) -> int:
    error_type = {"uncorrected": 1, "corrected": 0}[kind]  # NVML_MEMORY_ERROR_TYPE_*
    return int(nv.nvmlDeviceGetTotalEccErrors(h, error_type, 0))  # NVML_VOLATILE_ECC: since the last reboot


def _recovery_action(nv: Any, h: Any) -> int:
    value = nv.nvmlDeviceGetFieldValues(h, [230])[0]  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    if value.nvmlReturn:
        raise nv.NVMLError(value.nvmlReturn)
    return int(value.value.uiVal)


def _clock_events(nv: Any, h: Any) -> int:
    read = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(read(h))


def _processes(nv: Any, h: Any) -> list[tuple[int, str, int | None]]:
    found = []
    for proc in nv.nvmlDeviceGetComputeRunningProcesses(h):
        try:
            name = nv.nvmlSystemGetProcessName(proc.pid)
        except nv.NVMLError:
            name = ""
        used = proc.usedGpuMemory
        found.append((int(proc.pid), name.decode() if isinstance(name, bytes) else str(name),
                      None if used is None else int(used)))
    return found


def _nvlink_errors(nv: Any, h: Any, link: int) -> tuple[int, int, int, int]:
    # NVML_NVLINK_ERROR_DL_REPLAY, DL_RECOVERY, DL_CRC_FLIT, DL_CRC_DATA
    return tuple(int(nv.nvmlDeviceGetNvLinkErrorCounter(h, link, counter)) for counter in range(4))  # type: ignore[return-value]


# What a gatherer may read of a device, by name: the pynvml call(s) behind each.
def _mig_uuids(nv: Any, h: Any) -> list[str]:
    found = []
    for slot in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(h))):
        try:
            instance = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)
        except nv.NVMLError:  # NOT_FOUND: an empty slot
            continue
        uuid = nv.nvmlDeviceGetUUID(instance)
        found.append(uuid.decode() if isinstance(uuid, bytes) else str(uuid))
    return found


READS: dict[str, Callable[..., Any]] = {
    "name": lambda nv, h: nv.nvmlDeviceGetName(h),
    "uuid": lambda nv, h: nv.nvmlDeviceGetUUID(h),
    "pci_bus_id": lambda nv, h: nv.nvmlDeviceGetPciInfo(h).busId,
    "memory_total": lambda nv, h: int(nv.nvmlDeviceGetMemoryInfo(h).total),
    "memory_used": lambda nv, h: int(nv.nvmlDeviceGetMemoryInfo(h).used),
    "ecc_errors": _ecc,  # arg: "uncorrected" / "corrected"
    "ecc_mode": lambda nv, h: tuple(int(v) for v in nv.nvmlDeviceGetEccMode(h)),  # (current, pending)
    "remapped_rows": lambda nv, h: tuple(int(v) for v in nv.nvmlDeviceGetRemappedRows(h)),  # corr, unc, pending, failed
    "retired_pages_pending": lambda nv, h: int(nv.nvmlDeviceGetRetiredPagesPendingStatus(h)),
    "recovery_action": _recovery_action,
    "clock_event_reasons": _clock_events,
    "pcie_width": lambda nv, h: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
    "pcie_max_width": lambda nv, h: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h)),
    "pcie_gen": lambda nv, h: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
    "pcie_max_gen": lambda nv, h: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h)),
    "nvlink_state": lambda nv, h, link: int(nv.nvmlDeviceGetNvLinkState(h, link)),  # arg: link
    "nvlink_version": lambda nv, h, link: int(nv.nvmlDeviceGetNvLinkVersion(h, link)),
    "nvlink_errors": _nvlink_errors,  # arg: link
    "fabric_info": read_fabric_info,  # a GpuFabric (nvml_fabric.py: the V call, pynvml's structures)
    "persistence_mode": lambda nv, h: int(nv.nvmlDeviceGetPersistenceMode(h)),
    "compute_mode": lambda nv, h: int(nv.nvmlDeviceGetComputeMode(h)),
    "mig_mode": lambda nv, h: int(nv.nvmlDeviceGetMigMode(h)[0]),
    "processes": _processes,  # [(pid, name, used bytes)]
    "temperature": lambda nv, h: int(nv.nvmlDeviceGetTemperature(h, 0)),  # NVML_TEMPERATURE_GPU
    "slowdown_threshold": lambda nv, h: int(nv.nvmlDeviceGetTemperatureThreshold(h, 1)),  # THRESHOLD_SLOWDOWN
    "power_limit": lambda nv, h: int(nv.nvmlDeviceGetEnforcedPowerLimit(h)),
    "power_default": lambda nv, h: int(nv.nvmlDeviceGetPowerManagementDefaultLimit(h)),
    "vbios": lambda nv, h: nv.nvmlDeviceGetVbiosVersion(h),
    # read by the device probes (probes/device/boundary.py) while the GPU works
    "serial": lambda nv, h: nv.nvmlDeviceGetSerial(h),
    "sm_clock": lambda nv, h: int(nv.nvmlDeviceGetClockInfo(h, 1)),  # NVML_CLOCK_SM
    "max_sm_clock": lambda nv, h: int(nv.nvmlDeviceGetMaxClockInfo(h, 1)),
    "power_usage": lambda nv, h: int(nv.nvmlDeviceGetPowerUsage(h)),  # milliwatts
    "cuda_capability": lambda nv, h: tuple(int(v) for v in nv.nvmlDeviceGetCudaComputeCapability(h)),
    "mig_uuids": _mig_uuids,  # the MIG instances of a GPU in MIG mode ("MIG-<uuid>" each)
}


class Nvml:
    """An opened NVML, real or replayed: device handles and named reads, each under the deadline."""

    def __init__(self, backend: Any, deadline_s: float) -> None:
        self._backend = backend
        self._deadline = time.monotonic() + deadline_s

    def _call(self, func: Callable[..., Any], *args: Any) -> Any:
        if time.monotonic() > self._deadline:
            raise NvmlError(TIMEOUT, "gatherer deadline passed: NVML not called again")
        try:
            return func(*args)
        except NvmlError:
            raise
        except self._backend.NVMLError as exc:
            raise NvmlError(int(getattr(exc, "value", UNKNOWN) or UNKNOWN), str(exc)) from None

    def count(self) -> int:
        """How many GPUs NVML sees on this host (whatever CUDA_VISIBLE_DEVICES says)."""
        return int(self._call(self._backend.nvmlDeviceGetCount))

    def handle(self, index: int) -> Any:
        """The device handle of NVML index `index`."""
        return self._call(self._backend.nvmlDeviceGetHandleByIndex, index)

    def read(self, handle: Any, what: str, *args: Any) -> Any:
        """One named read of READS (raises NvmlError; `.unavailable` / `.lost` classify it)."""
        by_name = getattr(self._backend, "PYNVML_SHAPED", None)  # the replay FAKE's (nvml_replay.py); pynvml has none
        if by_name is not None and what not in by_name:
            return self._call(self._backend.read, handle, what, *args)
        return self._call(READS[what], self._backend, handle, *args)

    def shutdown(self) -> None:
        """Release NVML (every nvmlInit has its shutdown)."""
        try:
            self._backend.nvmlShutdown()
        except Exception:
            pass


class XidWatch:
    """Critical XID events of one GPU, registered now and drained later (the run's duration).

    It holds its own NVML session (nvmlInit is reference-counted) and event set until `close`.
    `drain` never blocks: it takes what the driver queued (a wait of 0 ms per event).
    """

    MAX_EVENTS = 256  # a GPU spamming XIDs: the first ones say enough

    def __init__(self, backend: Any, handle: Any, event_set: Any) -> None:
        self._backend, self._handle, self._set = backend, handle, event_set

    def drain(self) -> list[int]:
        """The XID numbers of the events that arrived since registration (or the last drain)."""
        xids: list[int] = []
        while len(xids) < self.MAX_EVENTS:
            try:
                event = self._backend.nvmlEventSetWait_v2(self._set, 0)
            except self._backend.NVMLError:  # TIMEOUT: nothing more queued
                break
            xids.append(int(event.eventData))
        return xids

    def close(self) -> None:
        """Free the event set and this watch's NVML session."""
        for release in (lambda: self._backend.nvmlEventSetFree(self._set), self._backend.nvmlShutdown):
            try:
                release()
            except Exception:  # closing must never fail a run
                pass


XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError


def watch_xids(index: int) -> tuple[XidWatch | None, NvmlError | None]:
    """Register for critical XID events on NVML device `index`: (a watch, None) or (None, why not)."""
    backend = module()
    if backend is None:
        return None, NvmlError(UNKNOWN, "nvidia-ml-py (pynvml) is not installed")
    try:
        backend.nvmlInit()
    except backend.NVMLError as exc:
        return None, NvmlError(int(getattr(exc, "value", UNKNOWN) or UNKNOWN), str(exc))
    try:
        handle = backend.nvmlDeviceGetHandleByIndex(index)
        event_set = backend.nvmlEventSetCreate()
        backend.nvmlDeviceRegisterEvents(handle, XID_CRITICAL, event_set)
    except backend.NVMLError as exc:
        backend.nvmlShutdown()
        return None, NvmlError(int(getattr(exc, "value", UNKNOWN) or UNKNOWN), str(exc))
    return XidWatch(backend, handle, event_set), None


def module() -> Any:
    """A pynvml-shaped module for steps/gather/gpus.py: the replay fake when configured, else pynvml.

    None when nvidia-ml-py is not installed.
    """
    path = os.environ.get(REPLAY_VARIABLE)
    if path:
        from preflight.lib.nvml_replay import Replay  # the FAKE: loaded only when a test asks for it

        return Replay(path)
    return installed_pynvml()


def installed_pynvml() -> Any:
    """nvidia-ml-py's module, or None where it is not installed (the replay FAKE takes its structures)."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def open_nvml(deadline_s: float) -> tuple[Nvml | None, str]:
    """(an initialised Nvml, "") or (None, why NVML is not available on this host)."""
    backend = module()
    if backend is None:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        backend.nvmlInit()
    except backend.NVMLError as exc:
        return None, str(exc) or type(exc).__name__
    except OSError as exc:  # a broken libnvidia-ml.so
        return None, f"{type(exc).__name__}: {exc}"
    return Nvml(backend, deadline_s), ""
