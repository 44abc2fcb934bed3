"""Host links judged fairly: copies take turns per PCIe switch, siblings share a topology position.

A DGX A100-like host (tests/lib/test_pci_topology.py lays out its sysfs): 8 A100s, two behind
each PCIe switch, two NUMA nodes, Gen4 x16 links. Through the fake device boundary and rank 0's
judge; the turns themselves through the real TorchDevice.link_turn (a lock file per switch).
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import pwd
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from preflight.lib.pci_topology import PciPlace
from preflight.model.device_probe import DeviceReport, HostLink
from preflight.probes.device import judge as device_judge
from preflight.probes.device.boundary import TorchDevice
from preflight.probes.device.family import run_family
from preflight.probes.device.run import findings
from tests.helpers.fake_device import FakeDevice, measure
from tests.helpers.tools import require_root

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


FAMILY_AS = """
import json, os, pwd, sys
sys.path.insert(0, {root!r})
import torch, torch.distributed
from preflight.lib.pci_topology import PciPlace
from preflight.model.device_probe import DeviceReport
from preflight.probes.device.boundary import TorchDevice
from preflight.probes.device.family import Sizes, run_family
from tests.helpers.fake_cuda import FakeCuda, gpu
user, host = sys.argv[1], sys.argv[2]
if user:  # everything imported first: this interpreter's files may be readable by root alone
    entry = pwd.getpwnam(user)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
model = FakeCuda([gpu(0)], rates={{"gemm": 0.5, "copy": 50.0, "host": 10.0}})
with model.install():
    device = TorchDevice("cuda", 0, place=PciPlace("0000:10:00.0", None), host=host)
    report = run_family(device, DeviceReport(0, host, "cuda"), budget_s=0.05,
                        sizes=Sizes(gemm_n=64, copy_bytes=2**20, host_bytes=2**20, sdc_n=64))
print(json.dumps({{"uid": os.geteuid(), "errors": report.errors, "measured": sorted(m.name for m in report.measured)}}))
"""


def _family_as(user: str | None, host: str) -> dict[str, object]:
    """The device family on one model GPU through the real TorchDevice (its host copies taking turns behind
    switch 0000:10:00.0 of `host`), in a fresh interpreter that runs as `user` (None: this test's own uid)
    once it has imported what it needs (a fork of the test's threaded process could deadlock on a lock
    another thread held); what it measured and what it could not."""
    root = str(Path(__file__).resolve().parents[3])
    done = subprocess.run([sys.executable, "-c", FAMILY_AS.format(root=root), user or "", host],
                          capture_output=True, text=True, timeout=300, cwd="/",
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _left_behind(host: str) -> list[str]:
    return [p for p in glob.glob(os.path.join(tempfile.gettempdir(), "preflight-pcie-*")) if host in p]


def test_a_second_user_on_the_node_after_the_first_measures_its_host_links_and_nothing_is_left() -> None:
    """A shared node: root's run, then `nobody`'s (a real other uid). A turn's lock file left 0644 by the
    first user would refuse the second's open (PermissionError: its host links DEV009, every later run)."""
    require_root()  # to become another uid
    host = f"shared{time.monotonic_ns()}"
    first = _family_as(None, host)
    assert first["errors"] == {} and {"h2d", "d2h"} <= set(first["measured"])  # type: ignore[operator]
    assert _left_behind(host) == []  # nothing on the node once the turns are over
    second = _family_as("nobody", host)
    assert second["uid"] == pwd.getpwnam("nobody").pw_uid
    assert second["errors"] == {} and {"h2d", "d2h"} <= set(second["measured"])  # type: ignore[operator]
    assert _left_behind(host) == []


def test_a_mig_instance_skips_its_host_link_with_the_reason_and_measures_the_rest() -> None:
    """A MIG instance shares its GPU's PCIe link with the other instances: its copies would measure theirs."""
    device = a100(0)
    report = DeviceReport(0, "node0", "cuda", name="NVIDIA A100-SXM4-80GB MIG 3g.40gb",
                          uuid="MIG-7a1e0000-0000-4000-8000-000000000071")
    run_family(device, report, budget_s=1.0)
    assert {m.name for m in report.measured} == {"gemm_bf16", "gemm_fp16", "gemm_tf32", "copy"}
    assert "is a MIG instance" in report.skipped["h2d"] and report.skipped["d2h"] == report.skipped["h2d"]
    assert device.turns == 0 and report.errors == {}
