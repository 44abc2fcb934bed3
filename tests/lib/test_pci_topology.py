"""A GPU's PCIe switch and NUMA node from a sysfs tree laid out like a DGX A100's (real files and symlinks).

Two NUMA nodes; four PCIe switches, two GPUs behind each (switches 0-1 on node 0, 2-3 on node
1); one more device straight on a root port, sharing nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from preflight.lib.pci_topology import PciPlace, node_cpus, pci_path, place, shares_uplink, sysfs_bus_id, uplink


def dgx_a100(root: Path) -> dict[int, str]:
    """GPU index -> its bus id as NVML writes it; the tree under root (as --sysfs-root)."""
    buses = {}
    for gpu in range(8):
        switch, numa = gpu // 2, gpu // 4
        complex_ = f"pci0000:{0x80 * numa:02x}"
        chain = [f"0000:{0x80 * numa:02x}:0{switch + 1}.1", f"0000:{0x10 * switch + 0x10:02x}:00.0",
                 f"0000:{0x10 * switch + 0x11:02x}:0{gpu % 2}.0", f"0000:{0x10 * switch + 0x12 + gpu % 2:02x}:00.0"]
        device = root / "devices" / complex_ / Path(*chain)
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{numa}\n")
        links = root / "bus" / "pci" / "devices"
        links.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(device, links), links / chain[-1])
        buses[gpu] = f"0000{chain[-1].upper()}"
    for numa, cpus in ((0, "0-63,128-191"), (1, "64-127,192-255")):
        node = root / "devices" / "system" / "node" / f"node{numa}"
        node.mkdir(parents=True)
        (node / "cpulist").write_text(cpus + "\n")
    alone = root / "devices" / "pci0000:00" / "0000:00:05.0" / "0000:05:00.0"
    alone.mkdir(parents=True)
    (alone / "numa_node").write_text("-1\n")
    links = root / "bus" / "pci" / "devices"
    os.symlink(os.path.relpath(alone, links), links / "0000:05:00.0")
    return buses


def test_gpus_behind_one_switch_share_it_and_sit_on_its_numa_node(tmp_path: Path) -> None:
    buses = dgx_a100(tmp_path)
    places = {gpu: place(bus, str(tmp_path)) for gpu, bus in buses.items()}
    assert places[0] == places[1] == PciPlace("0000:10:00.0", 0)
    assert places[6] == places[7] == PciPlace("0000:40:00.0", 1)
    assert len({p.switch for p in places.values()}) == 4
    assert sysfs_bus_id("00000000:12:00.0") == "0000:12:00.0"


def test_a_device_on_a_root_port_shares_nothing_and_unknown_parts_stay_empty(tmp_path: Path) -> None:
    dgx_a100(tmp_path)
    assert place("0000:05:00.0", str(tmp_path)) == PciPlace("0000:00:05.0", None)  # numa_node -1: unknown
    assert place("0000:99:00.0", str(tmp_path)) == PciPlace("", None)  # not in the tree
    assert place("", str(tmp_path)) == PciPlace()


def test_a_nodes_cpus_from_its_cpulist(tmp_path: Path) -> None:
    dgx_a100(tmp_path)
    cpus = node_cpus(1, str(tmp_path))
    assert len(cpus) == 128 and {64, 127, 192, 255} <= cpus and 0 not in cpus
    assert node_cpus(7, str(tmp_path)) == set()


def link_device(root: Path, complex_: str, chain: list[str], numa: int) -> str:
    """One device at the end of `chain` (bus ids from the root port down), linked from bus/pci/devices."""
    device = root / "devices" / complex_ / Path(*chain)
    device.mkdir(parents=True, exist_ok=True)
    (device / "numa_node").write_text(f"{numa}\n")
    links = root / "bus" / "pci" / "devices"
    links.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(device, links), links / chain[-1])
    return chain[-1]


def plx_under_a_root_port(root: Path) -> dict[str, str]:
    """Two levels of switch below one root port (a PLX fan-out under the root port's switch), and a GPU
    on a second root port; name -> bus id. GPUs a and b sit under one second-level switch, c under
    the other: all three cross the root port 0000:00:01.0's link to reach the CPU."""
    rp, top_up = "0000:00:01.0", "0000:01:00.0"
    return {
        "a": link_device(root, "pci0000:00", [rp, top_up, "0000:02:00.0", "0000:03:00.0", "0000:04:00.0",
                                              "0000:05:00.0"], 0),
        "b": link_device(root, "pci0000:00", [rp, top_up, "0000:02:00.0", "0000:03:00.0", "0000:04:01.0",
                                              "0000:06:00.0"], 0),
        "c": link_device(root, "pci0000:00", [rp, top_up, "0000:02:08.0", "0000:07:00.0", "0000:08:00.0",
                                              "0000:09:00.0"], 0),
        "nic": link_device(root, "pci0000:00", [rp, top_up, "0000:02:10.0", "0000:0a:00.0"], 0),
        "other": link_device(root, "pci0000:40", ["0000:40:01.0", "0000:41:00.0", "0000:42:00.0",
                                                  "0000:43:00.0"], 1),
        "vmd": link_device(root, "pci10000:e0", ["10000:e0:1d.0", "10000:e1:00.0", "10000:e2:00.0",
                                                 "10000:e3:00.0"], 1),
    }


def test_every_gpu_below_one_root_port_shares_its_uplink_however_many_switches_lie_between(tmp_path: Path) -> None:
    """The one definition of a switch (the lock's and the affinity checks'): a and c sit under two different
    second-level switches, but their copies to the host cross one link; the GPU on another root port does not."""
    bus = plx_under_a_root_port(tmp_path)
    places = {name: place(b, str(tmp_path)) for name, b in bus.items()}
    assert places["a"] == places["b"] == places["c"] == places["nic"] == PciPlace("0000:01:00.0", 0)
    assert places["other"] == PciPlace("0000:41:00.0", 1)
    paths = {name: pci_path(str(tmp_path / "bus" / "pci" / "devices" / b)) for name, b in bus.items()}
    assert shares_uplink(paths["a"], paths["c"]) and shares_uplink(paths["c"], paths["nic"])
    assert not shares_uplink(paths["a"], paths["other"])
    assert uplink(paths["a"]) == places["a"].switch  # the lock's switch is the affinity check's


def test_a_five_digit_pci_domain_keeps_all_its_digits(tmp_path: Path) -> None:
    """Intel VMD puts devices in domain 10000: NVML writes 00010000:E3:00.0."""
    plx_under_a_root_port(tmp_path)
    assert sysfs_bus_id("00010000:E3:00.0") == "10000:e3:00.0"
    assert place("00010000:E3:00.0", str(tmp_path)) == PciPlace("10000:e1:00.0", 1)
