"""NVML's fabric info (preflight/lib/nvml_fabric.py) through the replay FAKE, which must be as strict as the
driver: nvidia-ml-py's own structures, passed by reference, with the version field the V call requires."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pynvml
import pytest

from preflight.lib import nvml_source
from preflight.lib.nvml_fabric import ARGUMENT_VERSION_MISMATCH, health_faults, read_fabric_info, transient
from preflight.lib.nvml_source import NvmlError
from preflight.model import GpuFabric

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"
HEALTHY_MASK = 20906  # every field healthy (see tests/fixtures/nvml/gb200_nvl72.json)


def replay(monkeypatch: pytest.MonkeyPatch, fixture: str) -> Any:
    monkeypatch.setenv(nvml_source.REPLAY_VARIABLE, str(FIXTURES / f"{fixture}.json"))
    backend = nvml_source.module()
    backend.nvmlInit()
    return backend


def test_the_fake_takes_nvidia_ml_pys_own_structures(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = replay(monkeypatch, "gb200_nvl72")
    assert backend.c_nvmlGpuFabricInfo_v3_t is pynvml.c_nvmlGpuFabricInfo_v3_t
    assert backend.nvmlGpuFabricInfo_v2 == pynvml.nvmlGpuFabricInfo_v2
    fabric = read_fabric_info(backend, backend.nvmlDeviceGetHandleByIndex(0))
    assert fabric == GpuFabric(state=3, status=0, cluster_uuid="2d1c1f4e-7a3b-4c55-9e0e-5b8f3a6c9d01",
                               clique_id=32766, health_mask=HEALTHY_MASK, health_summary=1)
    assert fabric.domain == "2d1c1f4e-7a3b-4c55-9e0e-5b8f3a6c9d01/32766" and health_faults(fabric) == []


def test_the_fake_refuses_what_the_driver_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = replay(monkeypatch, "gb200_nvl72")
    handle = backend.nvmlDeviceGetHandleByIndex(0)
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    with pytest.raises(TypeError):
        backend.nvmlDeviceGetGpuFabricInfoV(handle, info)  # by value: the C call would read garbage
    info.version = pynvml.nvmlGpuFabricInfo_v2  # the version of another structure than the one passed
    with pytest.raises(NvmlError) as wrong:
        backend.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    assert wrong.value.code == ARGUMENT_VERSION_MISMATCH
    unset = pynvml.c_nvmlGpuFabricInfo_v2_t()
    unset.version = 0
    with pytest.raises(NvmlError):
        backend.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(unset))


def test_before_hopper_the_call_is_not_supported_a_fact_of_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = replay(monkeypatch, "a100_no_fabric")
    with pytest.raises(NvmlError) as raised:
        read_fabric_info(backend, backend.nvmlDeviceGetHandleByIndex(0))
    assert raised.value.unavailable  # NotSupported: listed, never an error


def test_an_older_driver_gets_the_v2_structure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fixture = tmp_path / "old_driver.json"
    fixture.write_text('{"extends": "%s", "device_defaults": {"fabric_info": {"state": 3, "clique_id": 1, '
                       '"cluster_uuid": "2d1c1f4e-7a3b-4c55-9e0e-5b8f3a6c9d01", "health_mask": 20905, '
                       '"max_version": 2}}}' % (FIXTURES / "gb200_nvl72.json"))
    monkeypatch.setenv(nvml_source.REPLAY_VARIABLE, str(fixture))
    backend = nvml_source.module()
    fabric = read_fabric_info(backend, backend.nvmlDeviceGetHandleByIndex(0))
    assert (fabric.health_mask, fabric.health_summary) == (20905, None)  # v2: a mask, no summary
    assert health_faults(fabric) == ["degraded bandwidth"]


def test_the_health_mask_is_read_field_by_field() -> None:
    def faults(mask: int, summary: int | None = 1) -> list[str]:
        return health_faults(GpuFabric(state=3, health_mask=mask, health_summary=summary))

    assert faults(HEALTHY_MASK) == [] and faults(0, 0) == []  # 0: every field not supported
    assert faults(HEALTHY_MASK - 2 + 1) == ["degraded bandwidth"]
    assert faults(HEALTHY_MASK - (1 << 14) + (2 << 14)) == ["fabric manager down (global fabric manager disconnected)"]
    assert faults(HEALTHY_MASK - (1 << 8) + (5 << 8)) == ["too few NVLinks"]
    assert faults(HEALTHY_MASK - (1 << 12) + (2 << 12)) == ["not assigned to a partition"]
    assert faults(HEALTHY_MASK, 2) == ["health summary: unhealthy"]
    assert not transient(GpuFabric(state=3, health_mask=HEALTHY_MASK))
    assert transient(GpuFabric(state=2)) and transient(GpuFabric(state=1))
    assert transient(GpuFabric(state=3, health_mask=HEALTHY_MASK - 8 + 4))  # a route recovery in progress
