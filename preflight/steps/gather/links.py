"""Network facts of one rank: InfiniBand / RoCE ports and the interface the job will use.

Runs after the `interfaces` gatherer (interfaces.py beside this file), whose
`facts.network.interfaces` list it reads, and fills:

* `ib_ports`: one IbPort per port under `<sysfs root>/class/infiniband/*/ports/*` (state,
  physical state, rate, link layer, the netdevs it maps to, a RoCE port's GID types) with its
  device's model, firmware and board id (`hca_type`, `fw_ver`, `board_id`). The sysfs root is
  `--sysfs-root` (default /sys): tests point it at a fixture tree, a fake of the kernel's layout,
  because no InfiniBand hardware exists on CI. A port NCCL may use (NCCL_IB_HCA's, every port when
  unset) whose link is still training (INIT / ARMED, Polling, PortConfigurationTraining) is read
  again for up to `GatherOptions.settle_grace_s` (lib/settle.py) before it is kept as it is.
* `chosen_interface`: the interface NCCL/Gloo will use on this rank: NCCL_SOCKET_IFNAME /
  GLOO_SOCKET_IFNAME's choice if one is set (preflight/lib/ifname.py's rules), else the first UP
  interface named `ib*` with an address, else the one that routes to MASTER_ADDR.
* `loopback_scope`: boot id + network namespace: ranks with the same value share 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from preflight.lib.ib_hca import HcaFilter
from preflight.lib.ifname import match_gloo_interfaces, match_interfaces
from preflight.lib.settle import grace_within, settle
from preflight.model import ChosenInterface, IbPort, Interface, RankFacts
from preflight.steps.gather.interfaces import read_interfaces

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions

IFNAME_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")  # NCCL's choice first
MAX_GIDS = 32  # populated GIDs kept per RoCE port (one or two per address of its netdev)
TRAINING_STATES = ("INIT", "ARMED")  # the subnet manager (or the peer) has not activated the port yet
TRAINING_PHYS = ("Polling", "PortConfigurationTraining", "LinkErrorRecovery")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _split_state(text: str) -> tuple[int | None, str]:
    """sysfs writes states as `4: ACTIVE` / `5: LinkUp`."""
    code, _, name = text.partition(":")
    if name and code.strip().isdigit():
        return int(code.strip()), name.strip()
    return None, text.strip()


def parse_rate_gbps(rate: str) -> float | None:
    """`400 Gb/sec (4X NDR)` -> 400.0; None when unreadable."""
    head = rate.split()
    try:
        return float(head[0]) if head and "Gb/sec" in rate else None
    except ValueError:
        return None


def gid_types(port: Path) -> dict[int, str]:
    """A RoCE port's populated GIDs: index -> `RoCE v2` / `IB/RoCE v1` (gid_attrs/types/<index>;
    the kernel answers an empty GID's type with an error, so unreadable entries are left out)."""
    folder = port / "gid_attrs" / "types"
    try:
        indices = sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit() and len(p.name) <= 4)
    except OSError:
        return {}
    found: dict[int, str] = {}
    for index in indices:
        text = _read(folder / str(index))
        if text:
            found[index] = text[:32]
            if len(found) >= MAX_GIDS:
                break
    return found


def read_port(device: Path, port: Path, device_netdevs: list[str]) -> IbPort:
    """One port's IbPort, its device's model and firmware included."""
    state_code, state = _split_state(_read(port / "state"))
    phys_code, phys = _split_state(_read(port / "phys_state"))
    rate = _read(port / "rate")
    layer = _read(port / "link_layer")
    # RoCE ports name their netdev per GID; IB ports share the PCI device's netdevs.
    gid_netdevs = {_read(p) for p in (port / "gid_attrs" / "ndevs").glob("*")} - {""}
    return IbPort(
        device=device.name,
        port=int(port.name) if port.name.isdigit() else port.name,
        state=state,
        state_code=state_code,
        phys_state=phys,
        phys_state_code=phys_code,
        rate=rate,
        rate_gbps=parse_rate_gbps(rate),
        link_layer=layer,
        netdevs=sorted(gid_netdevs) or device_netdevs,
        gid_types=gid_types(port) if layer == "Ethernet" else {},
        hca_type=_read(device / "hca_type")[:64],
        fw_ver=_read(device / "fw_ver")[:64],
        board_id=_read(device / "board_id")[:64],
    )


def read_ib_ports(sysfs_root: str) -> list[IbPort]:
    """One entry per InfiniBand / RoCE port found under sysfs_root/class/infiniband."""
    base = Path(sysfs_root, "class", "infiniband")
    if not base.is_dir():
        return []
    ports = []
    for device in sorted(base.iterdir()):
        device_netdevs = sorted(p.name for p in (device / "device" / "net").glob("*"))
        for port in sorted((device / "ports").glob("*"), key=lambda p: (len(p.name), p.name)):
            ports.append(read_port(device, port, device_netdevs))
    return ports


def training(port: IbPort) -> bool:
    """A link still coming up: worth reading again before NET002 judges it."""
    return port.state in TRAINING_STATES or port.phys_state in TRAINING_PHYS


def settle_ports(sysfs_root: str, ports: list[IbPort], grace_s: float, hca_spec: str | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> list[IbPort]:
    """The ports, each training one NCCL may use (NCCL_IB_HCA's, `hca_spec`; every port when unset) read
    again, all together, until they settle or grace_s has passed."""
    hca = HcaFilter.parse(hca_spec)
    watched = [training(p) and (hca is None or hca.allows(p.device, p.port)) for p in ports]
    if not any(watched):
        return ports
    base = Path(sysfs_root, "class", "infiniband")

    def reread() -> list[IbPort]:
        return [read_port(base / p.device, base / p.device / "ports" / str(p.port), p.netdevs) if watch else p
                for p, watch in zip(ports, watched, strict=True)]

    def still(now: list[IbPort]) -> bool:
        return any(watch and training(p) for p, watch in zip(now, watched, strict=True))

    settled, waited = settle(reread, still, ports, grace_s, sleep)
    for before, after, watch in zip(ports, settled, watched, strict=True):
        if watch:
            after.netdevs = before.netdevs
            after.waited_s = waited
    return settled


def _selected(variable: str, spec: str, names: list[str]) -> list[str]:
    """The interfaces a socket-ifname variable selects; none for a malformed list (NCCL008/9 say so)."""
    try:
        if variable == "GLOO_SOCKET_IFNAME":
            return match_gloo_interfaces(spec, names)
        return match_interfaces(spec, names)
    except ValueError:
        return []


def route_source(master_addr: str) -> str:
    """The local address the kernel picks to reach master_addr ("" when there is no route)."""
    try:
        infos = socket.getaddrinfo(master_addr, 9, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return ""
    for family, _, _, _, sockaddr in infos:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect(sockaddr)  # UDP connect sends nothing; it only picks a route
                return str(sock.getsockname()[0]).split("%")[0]
            except OSError:
                continue
    return ""


def _ipv4_first(addresses: list[str]) -> str:
    for address in addresses:
        if ":" not in address:
            return address
    return addresses[0] if addresses else ""


def choose_interface(interfaces: list[Interface], env: dict[str, str], master_addr: str) -> ChosenInterface:
    """The interface the job's sockets will use on this rank, and why."""
    by_name = {i.name: i for i in interfaces}
    names = [i.name for i in interfaces]
    for variable in IFNAME_VARIABLES:
        spec = env.get(variable, "")
        if spec.strip():
            matched = _selected(variable, spec, names)
            chosen = by_name[matched[0]] if matched else None
            return _chosen(chosen, f"{variable}={spec}")
    for interface in interfaces:
        if interface.name.startswith("ib") and interface.up and interface.addresses:
            return _chosen(interface, "first UP ib* interface with an address")
    source = route_source(master_addr)
    for interface in interfaces:
        if source and source in interface.addresses:
            return _chosen(interface, f"route to MASTER_ADDR {master_addr}", address=source)
    return _chosen(None, f"no ib* interface and no route to MASTER_ADDR {master_addr}")


def _chosen(interface: Interface | None, source: str, address: str = "") -> ChosenInterface:
    if interface is None:
        return ChosenInterface(source=source)
    return ChosenInterface(
        name=interface.name,
        source=source,
        address=address or _ipv4_first(interface.addresses),
        up=interface.up,
        mtu=interface.mtu,
    )


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.network.ib_ports, chosen_interface and loopback_scope."""
    interfaces = facts.network.interfaces
    if interfaces is None:  # the interfaces gatherer failed or was left out: read them here
        interfaces = read_interfaces()
    grace = grace_within(options.settle_grace_s, options.timeout_s)
    facts.network.ib_ports = settle_ports(options.sysfs_root, read_ib_ports(options.sysfs_root), grace,
                                          os.environ.get("NCCL_IB_HCA"))
    facts.network.chosen_interface = choose_interface(interfaces, dict(os.environ), facts.world.master_addr)
    facts.network.loopback_scope = loopback_scope()


def loopback_scope() -> str:
    """Who shares this rank's 127.0.0.1: the kernel (boot id) and network namespace it runs in.

    Fake hosts on one machine (Slurm's multiple slurmd, several launches) share loopback;
    real hosts, and network namespaces, do not.
    """
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "?"
    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        netns = 0
    return f"{boot}/{netns}"
