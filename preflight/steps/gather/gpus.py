"""GPUs this host's NVML sees: model, UUID, PCI bus, memory, NVLink, and the driver version.

NVML ships with the NVIDIA driver, not with preflight; nvidia-ml-py is only its binding.
On a host without the driver (a CPU CI runner, a laptop) the section stays empty and the
driver version unset: no GPU is not an error of the gatherer. The NVML module is a
parameter so tests can feed a data-driven fake (no GPU exists on CI machines).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from preflight.model import GpuFacts, RankFacts

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions

NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS on Hopper


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvlinks(nvml: Any, handle: Any) -> tuple[int, int]:
    """Active NVLink count and version; devices without NVLink raise NotSupported on link 0."""
    active, version = 0, 0
    for link in range(NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) == nvml.NVML_FEATURE_ENABLED:
                active += 1
                version = version or int(nvml.nvmlDeviceGetNvLinkVersion(handle, link))
        except nvml.NVMLError:
            break
    return active, version


def describe_gpus(nvml: Any) -> tuple[tuple[str, str], list[GpuFacts]]:
    """((driver, cuda_driver), gpus) read through an initialised NVML module."""
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    cuda = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
    cuda_driver = f"{cuda // 1000}.{cuda % 1000 // 10}"
    gpus = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        active, version = _nvlinks(nvml, handle)
        gpus.append(GpuFacts(
            index=index,
            name=_text(nvml.nvmlDeviceGetName(handle)),
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
            memory_total_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            nvlink_active=active,
            nvlink_version=version,
        ))
    return (driver, cuda_driver), gpus


def gather(facts: RankFacts, options: GatherOptions, nvml: Any = None) -> None:
    """Fill facts.gpus and the driver versions, or leave them empty where NVML is absent."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
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
