"""Host links judged fairly: copies take turns per PCIe switch, siblings share a topology position.

A DGX A100-like host (tests/lib/test_pci_topology.py lays out its sysfs): 8 A100s, two behind
each PCIe switch, two NUMA nodes, Gen4 x16 links. Through the fake device boundary and rank 0's
judge; the turns themselves through the real TorchDevice.link_turn (a lock file per switch).
"""

from __future__ import annotations

import itertools
import threading
import time

from preflight.lib.pci_topology import PciPlace
from preflight.model.device_probe import HostLink
from preflight.probes.device import judge as device_judge
from preflight.probes.device.boundary import TorchDevice
from preflight.probes.device.run import findings
from tests.helpers.fake_device import FakeDevice, measure

A100 = {"gemm_bf16": 250.0, "gemm_fp16": 250.0, "gemm_tf32": 120.0, "copy": 1700.0, "h2d": 24.0, "d2h": 24.0}
GEN4 = HostLink(4, 16, 4, 16)


def a100(gpu: int, switches: int = 4, **rates: float) -> FakeDevice:
    """GPU `gpu` of a host whose 8 GPUs sit behind `switches` PCIe switches (two NUMA nodes)."""
    per = 8 // switches
    return FakeDevice(rates={**A100, **rates}, name="NVIDIA A100-SXM4-80GB", link_read=GEN4,
                      place=PciPlace(f"switch{gpu // per}", gpu // 4))


def link_findings(devices: dict[int, FakeDevice]) -> list[tuple[str, list[int]]]:
    reports = {rank: measure(rank, device) for rank, device in devices.items()}
    judged = device_judge.judge(reports, {}, {r: rep.host for r, rep in reports.items()})
    return sorted((f.check_id, f.ranks) for f in findings(judged) if f.check_id in ("DEV005", "DEV006"))


def test_a_healthy_dgx_a100_raises_no_host_link_finding_and_every_copy_took_its_turn() -> None:
    devices = {r: a100(r) for r in range(8)}
    assert link_findings(devices) == []
    assert {d.turns for d in devices.values()} == {4}  # h2d and d2h, in both passes


def test_one_gpu_at_half_its_switch_mates_rate_is_named_alone() -> None:
    devices = {r: a100(r) for r in range(8)}
    devices[5] = a100(5, h2d=12.0)
    assert link_findings(devices) == [("DEV005", [5]), ("DEV006", [5])]


def test_siblings_share_a_topology_position() -> None:
    # Host 0: two GPUs per switch (their copies read ~20 GB/s); host 1: one GPU per switch (~25 GB/s).
    devices = {r: a100(r, h2d=20.0, d2h=20.0) for r in range(8)}
    devices.update({r: a100(r % 8, switches=8, h2d=25.0, d2h=25.0) for r in range(8, 16)})
    assert link_findings(devices) == []  # compared across positions, all 8 of host 0 would be "slow"


def test_host_copies_behind_one_switch_never_overlap() -> None:
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def copy(device: TorchDevice) -> None:
        for _ in range(3):
            with device.link_turn():
                began = time.monotonic()
                time.sleep(0.02)
                with lock:
                    spans.append((began, time.monotonic()))

    host = f"turns{time.monotonic_ns()}"
    mates = [TorchDevice("cpu", place=PciPlace("0000:10:00.0", 0), host=host) for _ in range(3)]
    threads = [threading.Thread(target=copy, args=(d,)) for d in mates]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    spans.sort()
    assert len(spans) == 9 and all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
