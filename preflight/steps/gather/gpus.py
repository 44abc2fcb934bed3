"""GPUs this host's NVML sees: model, UUID, PCI bus, memory, NVLink, and the driver version.

NVML ships with the NVIDIA driver, not with preflight; nvidia-ml-py is only its binding.
On a host without the driver (a CPU CI runner, a laptop) the section stays empty and the
driver version unset: no GPU is not an error of the gatherer. The NVML module is a
parameter so tests can feed a data-driven fake (no GPU exists on CI machines).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from preflight.lib import nvml_source
from preflight.model import GpuFacts, RankFacts

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions

NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS on Hopper


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# nvmlDeviceGetNvLinkVersion returns an nvmlNvlinkVersion_t enum, not the generation:
# NVML_NVLINK_VERSION_1_0 = 1, 2_0 = 2, 2_2 = 3, 3_0 = 4, 3_1 = 5, 4_0 = 6, 5_0 = 7, 6_0 = 8.
# GpuFacts.nvlink_version holds the generation (major version), which nominal.py maps to GB/s.
NVLINK_GENERATION = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}


def _nvlinks(nvml: Any, handle: Any) -> tuple[int, int]:
    """Active NVLink count and generation; devices without NVLink raise NotSupported on link 0."""
    active, generation = 0, 0
    for link in range(NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
        except nvml.NVMLError:
            break
        active += 1
        if not generation:
            try:
                generation = NVLINK_GENERATION.get(int(nvml.nvmlDeviceGetNvLinkVersion(handle, link)), 0)
            except nvml.NVMLError:
                pass
    return active, generation


def _field(nvml: Any, errors: list[str], name: str, read: Any, default: Any) -> Any:
    """One NVML read; a failure (NO_PERMISSION, GPU_IS_LOST, NOT_SUPPORTED) is noted, not fatal."""
    try:
        return read()
    except nvml.NVMLError as exc:
        errors.append(f"{name}: {exc}")
        return default


def _serial(nvml: Any, handle: Any) -> str:
    """The board serial, or "": many GPUs have none (NOT_SUPPORTED), which is no error of the GPU."""
    try:
        return _text(nvml.nvmlDeviceGetSerial(handle))
    except (nvml.NVMLError, AttributeError):  # AttributeError: an NVML binding (or replay) without the call
        return ""


def describe_gpus(nvml: Any) -> tuple[tuple[str, str], list[GpuFacts]]:
    """((driver, cuda_driver), gpus) read through an initialised NVML module.

    Every device and every field is read on its own: a GPU a cgroup hides (NO_PERMISSION) or
    one that fell off the bus (GPU_IS_LOST) keeps its index and the error, and never costs
    the host's other GPUs or its driver version.
    """
    host_errors: list[str] = []
    driver = _field(nvml, host_errors, "driver", lambda: _text(nvml.nvmlSystemGetDriverVersion()), "")
    cuda = _field(nvml, host_errors, "cuda", lambda: int(nvml.nvmlSystemGetCudaDriverVersion_v2()), 0)
    cuda_driver = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else ""
    gpus = []
    for index in range(_field(nvml, host_errors, "count", lambda: int(nvml.nvmlDeviceGetCount()), 0)):
        errors: list[str] = []
        handle = _field(nvml, errors, "handle", lambda i=index: nvml.nvmlDeviceGetHandleByIndex(i), None)
        if handle is None:
            gpus.append(GpuFacts(index=index, error="; ".join(errors)))
            continue
        active, generation = _field(nvml, errors, "nvlink", lambda h=handle: _nvlinks(nvml, h), (0, 0))
        gpus.append(GpuFacts(
            index=index,
            name=_field(nvml, errors, "name", lambda h=handle: _text(nvml.nvmlDeviceGetName(h)), ""),
            uuid=_field(nvml, errors, "uuid", lambda h=handle: _text(nvml.nvmlDeviceGetUUID(h)), ""),
            serial=_serial(nvml, handle),
            pci_bus_id=_field(nvml, errors, "pci", lambda h=handle: _text(nvml.nvmlDeviceGetPciInfo(h).busId), ""),
            memory_total_bytes=_field(nvml, errors, "memory",
                                      lambda h=handle: int(nvml.nvmlDeviceGetMemoryInfo(h).total), 0),
            nvlink_active=active,
            nvlink_version=generation,
            error="; ".join(errors),
        ))
    return (driver, cuda_driver), gpus


def gather(facts: RankFacts, options: GatherOptions, nvml: Any = None) -> None:
    """Fill facts.gpus and the driver versions, or leave them empty where NVML is absent."""
    if nvml is None:
        nvml = nvml_source.module()  # pynvml, or the test replay fake (PREFLIGHT_NVML_REPLAY)
        if nvml is None:
            return
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return  # no driver on this host: nothing to describe
    try:
        versions, gpus = describe_gpus(nvml)
    finally:
        nvml.nvmlShutdown()
    facts.versions.driver, facts.versions.cuda_driver = versions
    facts.gpus = gpus
