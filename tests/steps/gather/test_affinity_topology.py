"""The affinity gatherer places the GPU and its NICs by preflight/lib/pci_topology.py's one definition of a
PCIe switch."""

from __future__ import annotations

import os
from pathlib import Path

from preflight.model.placement_facts import NicPlacement
from preflight.steps.gather.affinity import local_to, pci_place
from tests.lib.test_pci_topology import link_device, plx_under_a_root_port


def test_a_nic_under_the_same_root_port_switch_is_local_to_a_gpu_two_levels_down(tmp_path: Path) -> None:
    bus = plx_under_a_root_port(tmp_path)
    links = tmp_path / "bus" / "pci" / "devices"
    numa, gpu_path = pci_place(links / bus["c"])
    nics = [NicPlacement(name, *pci_place(links / bus[name])) for name in ("nic", "other")]
    assert numa == 0 and [n.name for n in local_to(numa, gpu_path, nics)] == ["nic"]


def test_a_five_digit_domain_device_is_placed_with_its_whole_path(tmp_path: Path) -> None:
    bus = plx_under_a_root_port(tmp_path)
    numa, path = pci_place(tmp_path / "bus" / "pci" / "devices" / bus["vmd"])
    assert numa == 1 and path == ["10000:e0:1d.0", "10000:e1:00.0", "10000:e2:00.0", "10000:e3:00.0"]
    nic = link_device(tmp_path, "pci10000:e0", ["10000:e0:1d.0", "10000:e1:00.0", "10000:e2:08.0",
                                                "10000:e4:00.0"], 1)
    nics = [NicPlacement("mlx5_9", *pci_place(tmp_path / "bus" / "pci" / "devices" / nic))]
    assert [n.name for n in local_to(None, path, nics)] == ["mlx5_9"]  # by switch, the NUMA node unknown
    assert os.path.islink(tmp_path / "bus" / "pci" / "devices" / nic)
