"""Networks of fake hosts: real Linux network namespaces on bridges (see ../shared/LAB.md, section 3).

Each host is a tests/helpers/hosts.FakeHost (own hostname, own /etc/hosts) that also runs in its
own network namespace with two interfaces, `ib0` and `eth0`, each a veth pair whose other end
sits on a bridge in the root namespace (one bridge per network), a 10.x address on each; every
host's /etc/hosts names every host by its ib0 address. Commands run inside a host with
`host.popen(...)` / `host.run(...)`, and ranks with tests/helpers/ranks.spawn_env_ranks
(`place=spread(network, per_host)`); they see the host's interfaces, hostname and hosts file.

    def test_something(netns_hosts):
        hosts = netns_hosts(3)               # pf…h1, pf…h2, pf…h3 on 10.77.0.1-3 (ib0)
        hosts[1].set_link("ib0", up=False)   # plant a fault
        proc = hosts[0].popen([sys.executable, "-m", "preflight", "run"], env=...)

Every global name (namespaces, bridges, root-side veths, nft tables inside the namespaces)
starts with one prefix: $PREFLIGHT_NETNS_PREFIX, else `pfn<pid>`, so concurrent test sessions
never collide. `close()` always runs (the fixture's finalizer): it kills what was started in
the hosts, deletes the namespaces, veths, bridges and hosts files. Needs root, iproute2 and
util-linux's unshare; the fixture skips with a reason on a laptop and fails under CI=true
(tests/helpers/tools.py).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.hosts import FakeHost, hosts_file, require_namespaces
from tests.helpers.tools import require, require_root, require_tool

NETNS_ETC = Path("/etc/netns")  # where earlier versions of this module wrote hosts files
# ib0 lives on 10.77.0.0/24, eth0 on 10.77.1.0/24: host i has .i on both.
IB_NET = "10.77.0"
ETH_NET = "10.77.1"


def default_prefix() -> str:
    """The prefix of every global name this session creates."""
    return os.environ.get("PREFLIGHT_NETNS_PREFIX") or f"pfn{os.getpid() % 100000}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


@dataclass
class NetnsHost(FakeHost):
    """A fake host in its own network namespace (`netns`), with ib0 and eth0 on the bridges."""

    address: str = ""  # ib0's address
    eth_address: str = ""  # eth0's address
    index: int = 0  # 1-based

    @property
    def name(self) -> str:
        """The network namespace."""
        return self.netns or ""

    def set_link(self, ifname: str, up: bool) -> None:
        """Bring one of this host's interfaces up or down."""
        _ip("-n", self.name, "link", "set", ifname, "up" if up else "down")

    def shape(self, ifname: str, rate: str = "100mbit", burst: str = "64kb", latency: str = "50ms") -> None:
        """Limit the egress rate of an interface with tbf (netem does not exist on this kernel)."""
        require_tool("tc", "iproute2")
        subprocess.run(["ip", "netns", "exec", self.name, "tc", "qdisc", "replace", "dev", ifname, "root",
                        "tbf", "rate", rate, "burst", burst, "latency", latency],
                       check=True, capture_output=True, text=True, timeout=30)

    def unshape(self, ifname: str) -> None:
        """Remove the shaping of `shape` (no error when there is none)."""
        subprocess.run(["ip", "netns", "exec", self.name, "tc", "qdisc", "del", "dev", ifname, "root"],
                       capture_output=True, text=True, timeout=30)

    def nft(self, ruleset: str) -> None:
        """Load an nftables ruleset inside this host (`nft -f -`); without nft: skip, or fail in CI, saying so."""
        require_tool("nft", "nftables")
        subprocess.run(["ip", "netns", "exec", self.name, "nft", "-f", "-"], input=ruleset, check=True,
                       capture_output=True, text=True, timeout=30)

    def block_from(self, other: NetnsHost, table: str = "pffw") -> None:
        """Drop every packet arriving at this host from `other` (both of its addresses)."""
        self.nft(
            f"table inet {table} {{\n"
            "  chain in {\n"
            "    type filter hook input priority 0; policy accept;\n"
            f"    ip saddr {{ {other.address}, {other.eth_address} }} drop\n"
            "  }\n"
            "}\n"
        )

    def kill_started(self) -> None:
        """Kill every process started here that is still running, and anything left in the namespace."""
        super().kill_started()
        # Grandchildren the tests started (a launcher's workers) keep the namespace alive.
        listed = _ip("netns", "pids", self.name, check=False)
        for pid in listed.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


@dataclass
class FakeNetwork:
    """N fake hosts on two bridges (ib and eth); close() removes everything it made."""

    prefix: str
    hosts: list[NetnsHost]
    bridges: list[str]
    root_veths: list[str]
    folder: Path  # the hosts' /etc/hosts files

    def __getitem__(self, index: int) -> NetnsHost:
        return self.hosts[index]

    def __iter__(self) -> Iterator[NetnsHost]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def rsh_agent(self) -> Path:
        """An rsh/ssh stand-in that runs a command on a host of this network by its name:
        `agent [-options] HOST COMMAND...` runs the words as one shell command on HOST, as
        ssh does. MPI launchers take it as their remote shell (Open MPI's `--mca plm_rsh_agent`,
        Hydra's `-launcher rsh -launcher-exec`), so their daemons start on the fake hosts."""
        lines = ["#!/bin/sh", 'while [ "${1#-}" != "$1" ]; do shift; done  # ssh-style options', "host=$1; shift",
                 'case "$host" in']
        for host in self.hosts:
            enter = " ".join(shlex.quote(word) for word in host.command(["sh", "-c"]))
            lines.append(f'  {host.hostname}) exec {enter} "$*" ;;')
        lines += ['  *) echo "rsh agent: no fake host named $host" >&2; exit 255 ;;', "esac"]
        agent = self.folder / "rsh-agent"
        agent.write_text("\n".join(lines) + "\n")
        agent.chmod(0o755)
        return agent

    def close(self) -> None:
        """Kill what runs in the hosts, then delete namespaces, veths, bridges and hosts files."""
        for host in self.hosts:
            host.kill_started()
        remove_everything(self.prefix, len(self.hosts))
        shutil.rmtree(self.folder, ignore_errors=True)


def _names(prefix: str, count: int) -> tuple[list[str], list[str], list[str]]:
    namespaces = [f"{prefix}h{i}" for i in range(1, count + 1)]
    bridges = [f"{prefix}bri", f"{prefix}bre"]
    veths = [f"{prefix}h{i}{side}" for i in range(1, count + 1) for side in ("i", "e")]
    return namespaces, bridges, veths


def remove_everything(prefix: str, count: int) -> None:
    """Delete whatever a network with this prefix left behind (idempotent, errors ignored)."""
    namespaces, bridges, veths = _names(prefix, count)
    existing = set(_ip("netns", "list", check=False).stdout.split())
    for ns in namespaces:
        if ns in existing:
            _ip("netns", "del", ns, check=False)
        shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
    # Deleting a namespace frees the veth peers asynchronously: delete the root ends now.
    for name in (*veths, *bridges):
        if Path("/sys/class/net", name).exists():
            _ip("link", "del", name, check=False)


def build_fake_hosts(count: int, prefix: str | None = None) -> FakeNetwork:
    """Create `count` fake hosts (2-9) on two bridges; the caller must close() the result."""
    if not 1 <= count <= 9:
        raise ValueError("between 1 and 9 fake hosts")
    prefix = prefix or default_prefix()
    if len(f"{prefix}h9e") > 15:
        raise ValueError(f"prefix {prefix!r} too long for an interface name")
    remove_everything(prefix, 9)  # a crashed earlier session with the same prefix
    namespaces, bridges, _ = _names(prefix, count)
    folder = Path(tempfile.mkdtemp(prefix=f"{prefix}-hosts-"))
    addresses = {ns: f"{IB_NET}.{i}" for i, ns in enumerate(namespaces, 1)}
    hosts = [NetnsHost(ns, hosts_file(folder, ns, addresses), netns=ns, address=addresses[ns],
                       eth_address=f"{ETH_NET}.{i}", index=i) for i, ns in enumerate(namespaces, 1)]
    network = FakeNetwork(prefix, hosts, bridges, [], folder)
    try:
        for bridge in bridges:
            _ip("link", "add", bridge, "type", "bridge")
            _ip("link", "set", bridge, "up")
        for host in hosts:
            _ip("netns", "add", host.name)
            _ip("-n", host.name, "link", "set", "lo", "up")
            for inner, side, bridge, addr in (("ib0", "i", bridges[0], host.address),
                                              ("eth0", "e", bridges[1], host.eth_address)):
                outer = f"{host.name}{side}"
                peer = f"{host.name}{side}p"
                _ip("link", "add", outer, "type", "veth", "peer", "name", peer)
                _ip("link", "set", peer, "netns", host.name)
                _ip("-n", host.name, "link", "set", peer, "name", inner)
                _ip("-n", host.name, "addr", "add", f"{addr}/24", "dev", inner)
                _ip("-n", host.name, "link", "set", inner, "up")
                _ip("link", "set", outer, "master", bridge)
                _ip("link", "set", outer, "up")
                network.root_veths.append(outer)
    except BaseException:
        network.close()
        raise
    _wait_until_forwarding(network)
    return network


def _wait_until_forwarding(network: FakeNetwork, timeout_s: float = 5.0) -> None:
    """A new bridge port forwards after a moment; wait until each veth says so (no fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    for veth in network.root_veths:
        state = Path(f"/sys/class/net/{veth}/brport/state")
        while time.monotonic() < deadline:
            try:
                if state.read_text().strip() == "3":  # BR_STATE_FORWARDING
                    break
            except OSError:
                break
            time.sleep(0.02)


def netns_available() -> None:
    """Skip (laptop) or fail (CI) unless root with iproute2, unshare and netns support."""
    require_root()
    require_tool("ip", package="iproute2")
    require_namespaces()
    probe = f"{default_prefix()}probe"
    made = _ip("netns", "add", probe, check=False)
    _ip("netns", "del", probe, check=False)
    require(made.returncode == 0, "cannot create network namespaces (needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN; "
                                  f"in a container, --privileged): {made.stderr.strip()}")


@pytest.fixture
def netns_hosts() -> Iterator[Callable[..., FakeNetwork]]:
    """A factory `netns_hosts(n) -> FakeNetwork`; everything it built is removed afterwards, pass or fail."""
    netns_available()
    built: list[FakeNetwork] = []

    def build(count: int = 3, prefix: str | None = None) -> FakeNetwork:
        network = build_fake_hosts(count, prefix)
        built.append(network)
        return network

    try:
        yield build
    finally:
        for network in built:
            network.close()

