"""NVML's GPU fabric info: which NVLink domain a GPU registered with, and how healthy that is.

`read_fabric_info(nv, handle)` is the pynvml-shaped read behind nvml_source's `fabric_info`: `nv` is
pynvml or the replay FAKE, and this module never imports pynvml (nvml_source.py stays its only
importer). The call is `nvmlDeviceGetGpuFabricInfoV` with nvidia-ml-py's own structure, newest
first: `c_nvmlGpuFabricInfo_v3_t` (health summary), then `_v2_t` (health mask) when the driver
answers ARGUMENT_VERSION_MISMATCH; each structure's constructor sets the `version` field the V call
requires (`nvmlGpuFabricInfo_v3` / `_v2`). An nvidia-ml-py or driver without the V call gets the
deprecated v1 call (state, status, cluster UUID, clique; no health). Before Hopper the call is
NotSupported: a fact of the GPU, which nvml_source classifies as unavailable, never an error.

`FabricReplay` is the replay FAKE's half of it (tests only): a device's `fabric_info` fixture
entry fills the caller's structure as the driver would, as strictly: the structure must come by
reference with the version its type requires, and a `max_version` below it answers
ARGUMENT_VERSION_MISMATCH, as an older driver does.
"""

from __future__ import annotations

import ctypes
import uuid
from typing import Any

from preflight.model import GpuFabric

STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
COMPLETED = 3
NOT_SUPPORTED, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH = 3, 13, 25  # nvmlReturn_t

# NVML_GPU_FABRIC_HEALTH_MASK_*: (shift, width, {value: what it means when it is a fault}).
HEALTH_FIELDS: dict[str, tuple[int, int, dict[int, str]]] = {
    "degraded_bw": (0, 0x3, {1: "degraded bandwidth"}),
    "route_recovery": (2, 0x3, {1: "route recovery in progress"}),
    "route_unhealthy": (4, 0x3, {1: "route unhealthy"}),
    "access_timeout_recovery": (6, 0x3, {1: "access timeout recovery in progress"}),
    "incorrect_configuration": (8, 0xF, {2: "incorrect system GUID", 3: "incorrect chassis serial number",
                                         4: "no partition", 5: "too few NVLinks", 6: "incompatible GPU firmware",
                                         7: "invalid location", 8: "GPU state invalid"}),
    "partition_assigned": (12, 0x3, {2: "not assigned to a partition"}),
    "gfm_state": (14, 0x3, {2: "fabric manager down (global fabric manager disconnected)"}),
}
# Faults the fabric manager clears on its own within seconds: read again before they count (lib/settle.py).
RECOVERING = ("route_recovery", "access_timeout_recovery")
SUMMARIES = {2: "unhealthy", 3: "limited capacity"}  # NVML_GPU_FABRIC_HEALTH_SUMMARY_* that are faults


def health_field(mask: int, name: str) -> int:
    """One field of a health mask (0: not supported)."""
    shift, width, _ = HEALTH_FIELDS[name]
    return (mask >> shift) & width


def health_faults(fabric: GpuFabric) -> list[str]:
    """What the health mask and summary say is wrong, in words; [] for a healthy (or unreported) fabric."""
    faults = []
    if fabric.health_mask is not None:
        for name, (_, _, meaning) in HEALTH_FIELDS.items():
            text = meaning.get(health_field(fabric.health_mask, name))
            if text:
                faults.append(text)
    if not faults and fabric.health_summary in SUMMARIES:
        faults.append(f"health summary: {SUMMARIES[fabric.health_summary]}")
    return faults


def transient(fabric: GpuFabric | None) -> bool:
    """Registration not started / in progress, or a recovery under way: worth a second read."""
    if fabric is None:
        return False
    if fabric.state in (1, 2):
        return True
    mask = fabric.health_mask or 0
    return any(health_field(mask, name) == 1 for name in RECOVERING)


def _uuid_text(raw: Any) -> str:
    data = bytes(raw)
    return "" if not any(data) else str(uuid.UUID(bytes=data[:16]))


def _fabric(info: Any) -> GpuFabric:
    return GpuFabric(state=int(info.state), status=int(info.status), cluster_uuid=_uuid_text(info.clusterUuid),
                     clique_id=int(info.cliqueId), health_mask=getattr(info, "healthMask", None),
                     health_summary=getattr(info, "healthSummary", None))


def read_fabric_info(nv: Any, handle: Any) -> GpuFabric:
    """The GPU's fabric info through the newest call and structure both nvidia-ml-py and the driver know."""
    call = getattr(nv, "nvmlDeviceGetGpuFabricInfoV", None)
    if call is not None:
        for name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t"):
            struct = getattr(nv, name, None)
            if struct is None:
                continue
            info = struct()  # its constructor sets `version`, as the V call requires
            try:
                call(handle, ctypes.byref(info))
            except nv.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code == ARGUMENT_VERSION_MISMATCH:
                    continue  # a driver older than this structure: try the previous one
                if code == FUNCTION_NOT_FOUND:
                    break  # a driver without the V call
                raise
            return _fabric(info)
    legacy = getattr(nv, "c_nvmlGpuFabricInfo_t", None)
    if legacy is None:
        raise nv.NVMLError(NOT_SUPPORTED)  # an nvidia-ml-py older than the fabric info: nothing to ask
    info = legacy()
    nv.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    return _fabric(info)


# ---- the replay FAKE's half (tests only; format in docs/testing.md) ----

def _struct_of(ref: Any) -> Any:
    """The structure a `ctypes.byref(...)` points at; a structure passed by value is refused, as
    the C call would read garbage through it."""
    target = getattr(ref, "_obj", None)
    if target is None or not isinstance(target, ctypes.Structure):
        raise TypeError("nvmlDeviceGetGpuFabricInfoV takes ctypes.byref(<c_nvmlGpuFabricInfo_vN_t>)")
    return target


class FabricReplay:
    """The fabric calls of the NVML replay: pynvml's own structures, filled from a fixture entry.

    A device's `fabric_info` is {"state", "status", "cluster_uuid", "clique_id", "health_mask",
    "health_summary", "max_version"} (absent fields: zero, max_version 3), `{"error": ...}`, or
    {"sequence": [entry, ...]}: successive calls answer successive entries, the last one repeated
    (a registration that completes while preflight reads it again). No `fabric_info`: NotSupported,
    as before Hopper. The subclass supplies `_answer`, `read_entry` and pynvml's structures.
    """

    NVMLError: Any
    _calls: dict[int, int]

    def _answer(self, value: Any) -> Any:
        raise NotImplementedError

    def read_entry(self, device: dict[str, Any], what: str) -> Any:
        raise NotImplementedError

    def _next_fabric_entry(self, device: dict[str, Any]) -> dict[str, Any]:
        entry = self._answer(self.read_entry(device, "fabric_info"))
        if isinstance(entry, dict) and "sequence" in entry:
            steps = entry["sequence"]
            count = self._calls.get(id(device), 0)
            self._calls[id(device)] = count + 1
            entry = self._answer(steps[min(count, len(steps) - 1)])
        return dict(entry)

    def _fill(self, device: dict[str, Any], info: Any, version: int) -> None:
        entry = self._next_fabric_entry(device)
        if version > int(entry.get("max_version", 3)):
            raise self.NVMLError(ARGUMENT_VERSION_MISMATCH)
        cluster = entry.get("cluster_uuid", "")
        info.clusterUuid[:] = list(uuid.UUID(cluster).bytes if cluster else bytes(16))
        info.state, info.status, info.cliqueId = (int(entry.get(k, 0)) for k in ("state", "status", "clique_id"))
        if version >= 2:
            info.healthMask = int(entry.get("health_mask", 0))
        if version >= 3:
            info.healthSummary = int(entry.get("health_summary", 0))

    def nvmlDeviceGetGpuFabricInfoV(self, device: dict[str, Any], ref: Any) -> int:
        info = _struct_of(ref)
        versions = {getattr(self, f"nvmlGpuFabricInfo_v{n}", None): n for n in (2, 3)}
        version = versions.get(getattr(info, "version", None))
        if version is None or type(info) is not getattr(self, f"c_nvmlGpuFabricInfo_v{version}_t", None):
            raise self.NVMLError(ARGUMENT_VERSION_MISMATCH)  # the version field must name the structure passed
        self._fill(device, info, version)
        return 0

    def nvmlDeviceGetGpuFabricInfo(self, device: dict[str, Any], ref: Any) -> int:
        self._fill(device, _struct_of(ref), 1)
        return 0
