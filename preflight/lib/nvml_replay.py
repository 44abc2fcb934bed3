"""A replay FAKE of NVML, for tests only: NVML answered from a fixture file instead of the driver.

`PREFLIGHT_NVML_REPLAY=<file.json>` (read by lib/nvml_source.py, the one NVML boundary, and nowhere
else) makes `nvml_source.module()` return a `Replay` of that file: the same pynvml-shaped calls and
named reads, each answering a value, an error, or a list indexed by its argument. The fixtures are
tests/fixtures/nvml/; their format is docs/testing.md's. No GPU exists on CI machines; this is
where their absence is faked.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from preflight.lib.nvml_fabric import FabricReplay
from preflight.lib.nvml_source import (
    ERROR_CODES,
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    NOT_SUPPORTED,
    PER_LINK,
    REPLAY_VARIABLE,
    TIMEOUT,
    UNKNOWN,
    XID_CRITICAL,
    NvmlError,
    installed_pynvml,
)


def _expand(value: Any) -> Any:
    """{"each": V, "count": N} is N copies of V (18 NVLinks without 18 lines)."""
    if isinstance(value, dict) and set(value) == {"each", "count"}:
        return [_expand(value["each"]) for _ in range(int(value["count"]))]
    return value


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    return {**base, **over}


def load_replay(path: str | Path) -> dict[str, Any]:
    """A fixture file with its `extends` chain applied: system, and one dict of reads per device."""
    path = Path(path)
    data = json.loads(path.read_text())
    if "extends" in data:
        parent = load_replay(path.parent / data["extends"])
    else:
        parent = {"system": {}, "devices": []}
    defaults = data.get("device_defaults", {})
    devices = [_merge(defaults, d) for d in data["devices"]] if "devices" in data else \
        [_merge(d, defaults) for d in parent["devices"]]
    for index, override in data.get("device_overrides", {}).items():
        devices[int(index)] = _merge(devices[int(index)], override)
    return {"system": _merge(parent["system"], data.get("system", {})), "devices": devices}


# pynvml's structures and version constants the replay's pynvml-shaped calls take (nvml_fabric.py)
_PYNVML_NAMES = ("c_nvmlGpuFabricInfo_t", "c_nvmlGpuFabricInfo_v2_t", "c_nvmlGpuFabricInfo_v3_t",
                 "nvmlGpuFabricInfo_v2", "nvmlGpuFabricInfo_v3")


class Replay(FabricReplay):
    """NVML answered from a fixture: each read is a value, an error, or a list indexed by its argument.

    The reads in PYNVML_SHAPED are not looked up by name: the same READS function that calls the
    real pynvml calls the replay's pynvml-named methods, with nvidia-ml-py's own structures.
    """

    NVMLError = NvmlError
    NVML_FEATURE_ENABLED = 1
    PYNVML_SHAPED = frozenset({"fabric_info"})

    def __init__(self, path: str) -> None:
        self._calls: dict[int, int] = {}
        pynvml = installed_pynvml()
        for name in _PYNVML_NAMES:
            if hasattr(pynvml, name):
                setattr(self, name, getattr(pynvml, name))
        try:
            self.data = load_replay(path)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            self.data, self.broken = {"system": {}, "devices": []}, f"{REPLAY_VARIABLE}={path}: {exc}"
        else:
            self.broken = ""

    def _answer(self, value: Any) -> Any:
        if isinstance(value, dict) and "error" in value:
            raise NvmlError(ERROR_CODES.get(value["error"], UNKNOWN))
        return value

    def nvmlInit(self) -> None:
        if self.broken:
            raise NvmlError(UNKNOWN, self.broken)
        init = self.data["system"].get("init", None)
        if isinstance(init, dict) and "hang_s" in init:  # a driver that no longer answers (nvidia-smi hangs)
            time.sleep(float(init["hang_s"]))
            return
        self._answer(init)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return int(self._answer(self.data["system"].get("count", len(self.data["devices"]))))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        device = self.data["devices"][index]
        if device.get("lost"):
            raise NvmlError(GPU_IS_LOST)
        return device

    def read_entry(self, device: dict[str, Any], what: str) -> Any:
        """A device's fixture entry for `what`: lost and absent (NotSupported) raise, as the driver's call would."""
        if device.get("lost"):
            raise NvmlError(GPU_IS_LOST)
        if what not in device:
            raise NvmlError(NOT_SUPPORTED)
        return device[what]

    def read(self, device: dict[str, Any], what: str, *args: Any) -> Any:
        value = _expand(self._answer(self.read_entry(device, what)))
        for arg in args:
            try:
                value = _expand(self._answer(value[arg] if isinstance(value, list) else value[str(arg)]))
            except IndexError:  # a link index past the device's links: the driver's own answer
                raise NvmlError(INVALID_ARGUMENT if what in PER_LINK else NOT_SUPPORTED) from None
            except (KeyError, TypeError):
                raise NvmlError(NOT_SUPPORTED) from None
        if what == "processes":  # [[pid, name, used], ...] -> tuples, as the real read gives
            return [tuple(p) for p in value]
        return tuple(value) if isinstance(value, list) and what in ("ecc_mode", "remapped_rows",
                                                                   "nvlink_errors") else value

    # XID events: a device's "xid_events" ([79, ...]) are what the driver queued during the run;
    # `{"error": ...}` there makes registering fail.
    def nvmlEventSetCreate(self) -> dict[str, Any]:
        return {"queued": []}

    def nvmlDeviceRegisterEvents(self, device: dict[str, Any], types: int, event_set: dict[str, Any]) -> None:
        if device.get("lost"):
            raise NvmlError(GPU_IS_LOST)
        event_set["queued"] += list(self._answer(device.get("xid_events", [])))

    def nvmlEventSetWait_v2(self, event_set: dict[str, Any], timeout_ms: int) -> SimpleNamespace:
        if not event_set["queued"]:
            raise NvmlError(TIMEOUT)
        return SimpleNamespace(eventType=XID_CRITICAL, eventData=event_set["queued"].pop(0))

    def nvmlEventSetFree(self, event_set: dict[str, Any]) -> None:
        event_set["queued"] = []

    # The pynvml names steps/gather/gpus.py calls, answered from the same reads.
    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._answer(self.data["system"].get("driver", {"error": "NOT_SUPPORTED"})))

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return int(self._answer(self.data["system"].get("cuda_driver", {"error": "NOT_SUPPORTED"})))

    def nvmlDeviceGetName(self, device: dict[str, Any]) -> str:
        return str(self.read(device, "name"))

    def nvmlDeviceGetUUID(self, device: dict[str, Any]) -> str:
        return str(self.read(device, "uuid"))

    def nvmlDeviceGetPciInfo(self, device: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(busId=str(self.read(device, "pci_bus_id")))

    def nvmlDeviceGetMemoryInfo(self, device: dict[str, Any]) -> SimpleNamespace:
        used = self._answer(device.get("memory_used", 0))
        return SimpleNamespace(total=int(self.read(device, "memory_total")), used=int(used))

    def nvmlDeviceGetNvLinkState(self, device: dict[str, Any], link: int) -> int:
        return int(self.read(device, "nvlink_state", link))

    def nvmlDeviceGetNvLinkVersion(self, device: dict[str, Any], link: int) -> int:
        return int(self.read(device, "nvlink_version", link))
