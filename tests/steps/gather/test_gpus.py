"""The NVML gatherer, on a data-driven FAKE NVML (no GPU exists on CI machines).

The fake answers as NVML documents it: nvmlDeviceGetNvLinkVersion returns the
nvmlNvlinkVersion_t enum (NVML_NVLINK_VERSION_3_0 = 4, 3_1 = 5, 4_0 = 6, 5_0 = 7), not the
generation; errors are NVMLError subclasses per device and per call (NO_PERMISSION on a
cgroup-hidden GPU, GPU_IS_LOST).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from preflight.model import RankFacts, World
from preflight.steps.gather import GatherOptions
from preflight.steps.gather.gpus import gather


class FakeNVML:
    """A fake of the pynvml calls the gatherer makes, answering from a list of GPU dicts."""

    NVML_FEATURE_ENABLED = 1

    class NVMLError(Exception):
        pass

    # nvmlNvlinkVersion_t, as nvml.h / pynvml define it
    NVLINK_ENUM = {"3.0": 4, "3.1": 5, "4.0": 6, "5.0": 7}

    def __init__(self, gpus: list[dict], driver: str = "550.54.15", cuda: int = 12040, present: bool = True):
        self.gpus, self.driver, self.cuda, self.present = gpus, driver, cuda, present
        self.shut_down = False

    def nvmlInit(self) -> None:
        if not self.present:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return self.driver.encode()

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict:
        return self._fail(self.gpus[index], "handle")

    def _fail(self, gpu: dict, call: str) -> dict:
        """A device's `fail` maps a call (or "*") to the NVML error it raises."""
        error = gpu.get("fail", {}).get(call) or gpu.get("fail", {}).get("*")
        if error:
            raise self.NVMLError(error)
        return gpu

    def nvmlDeviceGetName(self, gpu: dict) -> str:
        return self._fail(gpu, "name")["name"]

    def nvmlDeviceGetUUID(self, gpu: dict) -> str:
        return gpu["uuid"]

    def nvmlDeviceGetPciInfo(self, gpu: dict) -> SimpleNamespace:
        return SimpleNamespace(busId=gpu["bus"].encode())

    def nvmlDeviceGetMemoryInfo(self, gpu: dict) -> SimpleNamespace:
        return SimpleNamespace(total=self._fail(gpu, "memory")["memory"])

    def nvmlDeviceGetNvLinkState(self, gpu: dict, link: int) -> int:
        if link >= gpu["links"]:
            raise self.NVMLError("Not Supported")
        return int(link not in gpu.get("down", ()))

    def nvmlDeviceGetNvLinkVersion(self, gpu: dict, link: int) -> int:
        return self.NVLINK_ENUM[gpu.get("nvlink", "4.0")]


def facts() -> RankFacts:
    return RankFacts(rank=0, host="h", world=World(launcher="single", rank=0, world_size=1))


def test_gpus_driver_and_nvlinks_are_read() -> None:
    nvml = FakeNVML([{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "bus": "00000000:18:00.0",
                      "memory": 85 * 2**30, "links": 18, "down": {3}},
                     {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-2", "bus": "00000000:2A:00.0",
                      "memory": 85 * 2**30, "links": 0}])
    target = facts()
    gather(target, GatherOptions(), nvml=nvml)
    assert target.versions.driver == "550.54.15" and target.versions.cuda_driver == "12.4"
    assert [g.uuid for g in target.gpus] == ["GPU-1", "GPU-2"]
    assert target.gpus[0].nvlink_active == 17 and target.gpus[0].nvlink_version == 4  # H100: NVLink 4.0 (enum 6)
    assert target.gpus[1].nvlink_active == 0
    assert target.gpus[0].pci_bus_id == "00000000:18:00.0"
    assert nvml.shut_down


@pytest.mark.parametrize(("nvlink", "generation"), [("3.0", 3), ("3.1", 3), ("4.0", 4), ("5.0", 5)])
def test_nvlink_version_enum_is_stored_as_its_generation(nvlink: str, generation: int) -> None:
    target = facts()
    gather(target, GatherOptions(), nvml=FakeNVML([{"name": "GPU", "uuid": "GPU-1", "bus": "00000000:18:00.0",
                                                    "memory": 1, "links": 12, "nvlink": nvlink}]))
    assert target.gpus[0].nvlink_version == generation


def test_one_failing_device_keeps_the_hosts_other_gpus_and_driver() -> None:
    good = {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a", "bus": "00000000:07:00.0", "memory": 80 * 2**30,
            "links": 12, "nvlink": "3.0"}
    hidden = {**good, "uuid": "GPU-b", "fail": {"handle": "Insufficient Permissions"}}  # cgroup-hidden
    lost = {**good, "uuid": "GPU-c", "bus": "00000000:0F:00.0",
            "fail": {"memory": "GPU is lost", "name": "GPU is lost"}}
    target = facts()
    gather(target, GatherOptions(), nvml=FakeNVML([good, hidden, lost, {**good, "uuid": "GPU-d"}]))
    assert target.versions.driver == "550.54.15"
    assert [g.uuid for g in target.gpus] == ["GPU-a", "", "GPU-c", "GPU-d"]
    assert "Insufficient Permissions" in target.gpus[1].error
    assert target.gpus[2].pci_bus_id == "00000000:0F:00.0" and "memory: GPU is lost" in target.gpus[2].error
    assert target.gpus[3].nvlink_version == 3 and not target.gpus[3].error


def test_no_driver_leaves_the_section_empty() -> None:
    target = facts()
    gather(target, GatherOptions(), nvml=FakeNVML([], present=False))
    assert target.gpus == [] and not target.versions.driver


def test_real_nvml_binding_on_this_machine_does_not_fail() -> None:
    target = facts()
    gather(target, GatherOptions())  # no GPU here: empty; on a GPU host: the real devices
    assert bool(target.gpus) == bool(target.versions.driver)
    assert all(g.uuid and g.memory_total_bytes > 0 for g in target.gpus)
