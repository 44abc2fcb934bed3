"""The fake-host fixture itself: distinct hosts that really talk over ib0, and a clean teardown."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.netns import FakeNetwork, build_fake_hosts, netns_available

pytestmark = pytest.mark.netns

CONNECT = (
    "import socket, sys\n"
    "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)\n"
    "print(s.getsockname()[0])\n"
)


def test_hosts_have_own_names_addresses_and_reach_each_other(netns_hosts) -> None:
    hosts: FakeNetwork = netns_hosts(3)
    names = [h.run(["hostname"]).stdout.strip() for h in hosts]
    assert names == [h.hostname for h in hosts] and len(set(names)) == 3
    # Each host resolves every other by name (per-namespace hosts file) to its ib0 address.
    resolved = hosts[0].run(["getent", "hosts", hosts[2].hostname]).stdout.split()[0]
    assert resolved == hosts[2].address
    addrs = hosts[1].run(["ip", "-br", "-4", "addr", "show"]).stdout
    assert hosts[1].address in addrs and hosts[1].eth_address in addrs

    listener = hosts[2].popen([sys.executable, "-c", (
        "import socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', 24999)); s.listen(); print('ready', flush=True)\n"
        "while True: s.accept()[0].close()\n")], stdout=-1, text=True)
    assert listener.stdout.readline().strip() == "ready"
    ok = hosts[0].run([sys.executable, "-c", CONNECT, hosts[2].hostname, "24999"])
    assert ok.stdout.strip() == hosts[0].address

    hosts[0].set_link("ib0", up=False)
    down = hosts[0].run([sys.executable, "-c", CONNECT, hosts[2].address, "24999"], check=False)
    assert down.returncode != 0


def test_firewall_blocks_one_pair_only(netns_hosts) -> None:
    hosts: FakeNetwork = netns_hosts(3)
    listener = hosts[0].popen([sys.executable, "-c", (
        "import socket\n"
        "s = socket.socket(); s.bind(('0.0.0.0', 24998)); s.listen(); print('ready', flush=True)\n"
        "while True: s.accept()[0].close()\n")], stdout=-1, text=True)
    assert listener.stdout.readline().strip() == "ready"
    hosts[0].block_from(hosts[1])
    blocked = hosts[1].run([sys.executable, "-c", CONNECT, hosts[0].address, "24998"], check=False)
    allowed = hosts[2].run([sys.executable, "-c", CONNECT, hosts[0].address, "24998"], check=False)
    assert blocked.returncode != 0 and allowed.returncode == 0


def test_close_removes_everything_even_with_processes_running() -> None:
    netns_available()
    network = build_fake_hosts(2, prefix=None)
    sleeper = network[0].popen(["sleep", "600"])
    network.close()
    assert sleeper.poll() is not None
    for host in network:
        assert not Path("/var/run/netns", host.name).exists()
        assert not Path("/etc/netns", host.name).exists()
    for name in (*network.bridges, *network.root_veths):
        assert not Path("/sys/class/net", name).exists()
