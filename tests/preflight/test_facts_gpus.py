"""The NVML gatherer, on a data-driven fake NVML (no GPU exists on CI machines)."""

from __future__ import annotations

from types import SimpleNamespace

from preflight.model import RankFacts, World
from preflight.steps.gather import GatherOptions
from preflight.steps.gather.gpus import gather


class FakeNVML:
    """A fake of the pynvml calls the gatherer makes, answering from a list of GPU dicts."""

    NVML_FEATURE_ENABLED = 1

    class NVMLError(Exception):
        pass

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
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: dict) -> str:
        return gpu["name"]

    def nvmlDeviceGetUUID(self, gpu: dict) -> str:
        return gpu["uuid"]

    def nvmlDeviceGetPciInfo(self, gpu: dict) -> SimpleNamespace:
        return SimpleNamespace(busId=gpu["bus"].encode())

    def nvmlDeviceGetMemoryInfo(self, gpu: dict) -> SimpleNamespace:
        return SimpleNamespace(total=gpu["memory"])

    def nvmlDeviceGetNvLinkState(self, gpu: dict, link: int) -> int:
        if link >= gpu["links"]:
            raise self.NVMLError("Not Supported")
        return int(link not in gpu.get("down", ()))

    def nvmlDeviceGetNvLinkVersion(self, gpu: dict, link: int) -> int:
        return 4


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
    assert target.gpus[0].nvlink_active == 17 and target.gpus[0].nvlink_version == 4
    assert target.gpus[1].nvlink_active == 0
    assert target.gpus[0].pci_bus_id == "00000000:18:00.0"
    assert nvml.shut_down


def test_no_driver_leaves_the_section_empty() -> None:
    target = facts()
    gather(target, GatherOptions(), nvml=FakeNVML([], present=False))
    assert target.gpus == [] and not target.versions.driver


def test_real_nvml_binding_on_this_machine_does_not_fail() -> None:
    target = facts()
    gather(target, GatherOptions())  # no GPU here: empty; on a GPU host: the real devices
    assert bool(target.gpus) == bool(target.versions.driver)
    assert all(g.uuid and g.memory_total_bytes > 0 for g in target.gpus)
