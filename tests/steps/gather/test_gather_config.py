"""The interfaces and MASTER_ADDR gatherers, on this machine's real network stack."""

from __future__ import annotations

import socket

import psutil

from preflight.steps.gather import GatherOptions, gather_facts, interfaces
from preflight.steps.gather import master_addr as rendezvous
from preflight.steps.launchers import resolve_world


def test_interfaces_shape_matches_psutil(tmp_path) -> None:
    world = resolve_world({}, host="h")
    facts = gather_facts(world, GatherOptions(sysfs_root=str(tmp_path)), [("interfaces", interfaces.gather)])
    found = {i.name: i for i in facts.network.interfaces or []}
    assert set(found) == set(psutil.net_if_addrs()) | set(psutil.net_if_stats())
    assert found["lo"].up is True and found["lo"].mtu > 0 and "127.0.0.1" in found["lo"].addresses
    for entry in found.values():
        assert set(entry.__struct_fields__) == {"name", "up", "mtu", "speed_mbps", "addresses"}


def test_master_addr_resolution() -> None:
    world = resolve_world({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": socket.gethostname()})
    facts = gather_facts(world, GatherOptions(), [("rendezvous", rendezvous.gather)])
    entry = facts.network.master_addr
    assert entry is not None and entry.addr == socket.gethostname() and entry.ips and entry.error == ""
    world.master_addr = "pf3-no-such-host.invalid"
    facts = gather_facts(world, GatherOptions(), [("rendezvous", rendezvous.gather)])
    entry = facts.network.master_addr
    assert entry is not None and entry.error and entry.ips == []
    assert rendezvous.resolve("::1") == ["::1"]
