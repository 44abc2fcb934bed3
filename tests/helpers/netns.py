"""Fake hosts for tests: real Linux network namespaces on a bridge (see ../shared/LAB.md, section 3).

Each fake host is one network namespace with two interfaces, `ib0` and `eth0`, each a veth
pair whose other end sits on a bridge in the root namespace (one bridge per network), a
10.x address on each, its own hostname (`unshare --uts` at exec time) and its own hosts file
(`/etc/netns/<ns>/hosts`, which `ip netns exec` bind-mounts over /etc/hosts) naming every
fake host by its ib0 address. Commands run inside a host with `host.popen(...)` /
`host.run(...)`; they see the host's interfaces, hostname and hosts file.

    def test_something(netns_hosts):
        hosts = netns_hosts(3)               # pf…h1, pf…h2, pf…h3 on 10.77.0.1-3 (ib0)
        hosts[1].set_link("ib0", up=False)   # plant a fault
        proc = hosts[0].popen([sys.executable, "-m", "preflight", "run"], env=...)

Every global name (namespaces, bridges, root-side veths, /etc/netns dirs, nft tables inside
the namespaces) starts with one prefix: $PREFLIGHT_NETNS_PREFIX, else `pfn<pid>`, so
concurrent test sessions never collide. `close()` always runs (the fixture's finalizer):
it kills what was started in the hosts, deletes the namespaces, veths, bridges and dirs.
Needs root, iproute2 and util-linux's unshare; the fixture skips with a reason on a laptop and
fails under CI=true (tests/helpers/tools.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.ranks import PYTHON, RankRun, base_env, free_port, wait_for_ranks
from tests.helpers.tools import require, require_root, require_tool

NETNS_ETC = Path("/etc/netns")
# ib0 lives on 10.77.0.0/24, eth0 on 10.77.1.0/24: host i has .i on both.
IB_NET = "10.77.0"
ETH_NET = "10.77.1"


def default_prefix() -> str:
    """The prefix of every global name this session creates."""
    return os.environ.get("PREFLIGHT_NETNS_PREFIX") or f"pfn{os.getpid() % 100000}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


@dataclass
class FakeHost:
    """One fake host: a network namespace with its own hostname and hosts file."""

    name: str  # the network namespace
    hostname: str  # its UTS hostname, resolvable in every fake host's hosts file
    address: str  # ib0's address
    eth_address: str  # eth0's address
    index: int  # 1-based
    _procs: list[subprocess.Popen[Any]] = field(default_factory=list, repr=False)

    def command(self, argv: Sequence[str]) -> list[str]:
        """argv wrapped so it runs inside this host, under its own hostname."""
        return ["ip", "netns", "exec", self.name, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname, *argv]

    def popen(self, argv: Sequence[str], env: Mapping[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[Any]:
        """Start argv inside this host; close() kills it if it is still running."""
        proc = subprocess.Popen(self.command(argv), env=dict(env) if env is not None else None, **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60,
            **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run argv inside this host to completion (text output captured)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(argv), check=check, timeout=timeout, **kwargs)

    def set_link(self, ifname: str, up: bool) -> None:
        """Bring one of this host's interfaces up or down."""
        _ip("-n", self.name, "link", "set", ifname, "up" if up else "down")

    def shape(self, ifname: str, rate: str = "100mbit", burst: str = "64kb", latency: str = "50ms") -> None:
        """Limit the egress rate of an interface with tbf (netem does not exist on this kernel)."""
        require_tool("tc", "iproute2")
        subprocess.run(["ip", "netns", "exec", self.name, "tc", "qdisc", "replace", "dev", ifname, "root",
                        "tbf", "rate", rate, "burst", burst, "latency", latency],
                       check=True, capture_output=True, text=True, timeout=30)

    def nft(self, ruleset: str) -> None:
        """Load an nftables ruleset inside this host (`nft -f -`); without nft: skip, or fail in CI, saying so."""
        require_tool("nft", "nftables")
        subprocess.run(["ip", "netns", "exec", self.name, "nft", "-f", "-"], input=ruleset, check=True,
                       capture_output=True, text=True, timeout=30)

    def block_from(self, other: FakeHost, table: str = "pffw") -> None:
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
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
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
    hosts: list[FakeHost]
    bridges: list[str]
    root_veths: list[str]

    def __getitem__(self, index: int) -> FakeHost:
        return self.hosts[index]

    def __iter__(self) -> Iterator[FakeHost]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def close(self) -> None:
        """Kill what runs in the hosts, then delete namespaces, veths, bridges and hosts files."""
        for host in self.hosts:
            host.kill_started()
        remove_everything(self.prefix, len(self.hosts))


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
    hosts = [FakeHost(ns, ns, f"{IB_NET}.{i}", f"{ETH_NET}.{i}", i) for i, ns in enumerate(namespaces, 1)]
    network = FakeNetwork(prefix, hosts, bridges, [])
    try:
        for bridge in bridges:
            _ip("link", "add", bridge, "type", "bridge")
            _ip("link", "set", bridge, "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(f"{h.address} {h.hostname}\n" for h in hosts)
        for host in hosts:
            _ip("netns", "add", host.name)
            (NETNS_ETC / host.name).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / host.name / "hosts").write_text(hosts_file)
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
    require_tool("ip")
    require_tool("unshare")
    probe = f"{default_prefix()}probe"
    made = _ip("netns", "add", probe, check=False)
    _ip("netns", "del", probe, check=False)
    require(made.returncode == 0, f"cannot create network namespaces: {made.stderr.strip()}")


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


def spawn_ranks_on_hosts(
    network: FakeNetwork | Sequence[FakeHost],
    ranks_per_host: int,
    args: Sequence[str] = (),
    *,
    master: str | None = None,
    port: int | None = None,
    common_env: Mapping[str, str] | None = None,
    host_env: Mapping[int, Mapping[str, str]] | None = None,
    timeout: float = 120,
) -> dict[int, RankRun]:
    """`python -m preflight run ARGS` as env:// ranks, `ranks_per_host` in each fake host; wait for all.

    Ranks are numbered host by host (host 0 holds ranks 0..n-1). MASTER_ADDR defaults to the
    first host's hostname (resolved through the hosts files to its ib0 address); host_env
    adds variables per host index (0-based).
    """
    hosts = list(network)
    world = len(hosts) * ranks_per_host
    port = port or free_port()
    procs = {}
    started = time.monotonic()
    for index, host in enumerate(hosts):
        for local in range(ranks_per_host):
            rank = index * ranks_per_host + local
            env = base_env({
                "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": str(ranks_per_host), "GROUP_RANK": str(index),
                "MASTER_ADDR": master or hosts[0].hostname, "MASTER_PORT": str(port),
                **(common_env or {}), **((host_env or {}).get(index, {})),
            })
            procs[rank] = host.popen([PYTHON, "-m", "preflight", "run", *args], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return wait_for_ranks(procs, started, timeout)
