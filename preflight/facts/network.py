"""Network facts of one rank: interfaces, InfiniBand / RoCE ports, the interface the job will use.

Fills `facts.network` with:

* `interfaces`: `[{"name", "up", "mtu", "addresses"}]` from psutil (no parsing of `ip`).
* `ib_devices`: one entry per port under `<sysfs root>/class/infiniband/*/ports/*` with its
  state, physical state, rate ("400 Gb/sec (4X NDR)") and link layer, and the netdevs it maps
  to. The sysfs root is `--sysfs-root` (default /sys): tests point it at a fixture tree, a fake
  of the kernel's layout, because no InfiniBand hardware exists on a CI machine.
* `socket_ifnames`: each of NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME that is set, its entries
  and the interfaces it selects (NCCL: prefixes, `^` excludes, `=` exact; Gloo: exact names).
* `chosen_interface`: the interface NCCL/Gloo will use on this rank: the variable's choice if
  one is set, else the first UP interface named `ib*` with an address, else the one that
  routes to MASTER_ADDR. `{"name", "source", "address", "up", "mtu"}`, name "" when none.
* `master_addr`: what MASTER_ADDR resolves to here (`addresses`, or `error`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from preflight.model import RankFacts

if TYPE_CHECKING:
    from preflight.facts import GatherOptions

IFNAME_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def read_interfaces() -> list[dict[str, Any]]:
    """Every interface with its up flag, MTU and IPv4/IPv6 addresses (psutil)."""
    import psutil

    stats = psutil.net_if_stats()
    addrs = psutil.net_if_addrs()
    interfaces = []
    for name in sorted(set(stats) | set(addrs)):
        stat = stats.get(name)
        addresses = [
            a.address.split("%")[0]
            for a in addrs.get(name, [])
            if a.family in (socket.AF_INET, socket.AF_INET6)
        ]
        interfaces.append({
            "name": name,
            "up": bool(stat.isup) if stat else False,
            "mtu": int(stat.mtu) if stat else 0,
            "addresses": addresses,
        })
    return interfaces


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


def read_ib_devices(sysfs_root: str) -> list[dict[str, Any]]:
    """One entry per InfiniBand / RoCE port found under sysfs_root/class/infiniband."""
    base = Path(sysfs_root, "class", "infiniband")
    if not base.is_dir():
        return []
    ports = []
    for device in sorted(base.iterdir()):
        device_netdevs = sorted(p.name for p in (device / "device" / "net").glob("*"))
        for port in sorted((device / "ports").glob("*"), key=lambda p: (len(p.name), p.name)):
            state_code, state = _split_state(_read(port / "state"))
            phys_code, phys = _split_state(_read(port / "phys_state"))
            rate = _read(port / "rate")
            # RoCE ports name their netdev per GID; IB ports share the PCI device's netdevs.
            gid_netdevs = {_read(p) for p in (port / "gid_attrs" / "ndevs").glob("*")} - {""}
            ports.append({
                "device": device.name,
                "port": int(port.name) if port.name.isdigit() else port.name,
                "state": state,
                "state_code": state_code,
                "phys_state": phys,
                "phys_state_code": phys_code,
                "rate": rate,
                "rate_gbps": parse_rate_gbps(rate),
                "link_layer": _read(port / "link_layer"),
                "netdevs": sorted(gid_netdevs) or device_netdevs,
            })
    return ports


def ifname_entries(spec: str) -> tuple[bool, bool, list[str]]:
    """NCCL's syntax: (exclude, exact, entries). `^` excludes, `=` means exact names."""
    text = spec.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    return exclude, exact, [entry.strip() for entry in text.split(",")]


def _entries(variable: str, spec: str) -> list[str]:
    if variable == "GLOO_SOCKET_IFNAME":
        return [entry.strip() for entry in spec.split(",")]
    return ifname_entries(spec)[2]


def match_ifname_spec(variable: str, spec: str, names: list[str]) -> list[str]:
    """The interfaces a socket-ifname variable selects among names.

    Gloo takes exact names; NCCL takes prefixes unless `=`, and `^` inverts the list.
    Empty entries are ignored here (a check reports them).
    """
    if variable == "GLOO_SOCKET_IFNAME":
        wanted = [e.strip() for e in spec.split(",") if e.strip()]
        return [n for n in wanted if n in names]
    exclude, exact, entries = ifname_entries(spec)
    entries = [e for e in entries if e]

    def hit(name: str) -> bool:
        return any(name == e if exact else name.startswith(e) for e in entries)

    return [n for n in names if hit(n) != exclude]


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


def choose_interface(interfaces: list[dict[str, Any]], env: dict[str, str], master_addr: str) -> dict[str, Any]:
    """The interface the job's sockets will use on this rank, and why."""
    by_name = {i["name"]: i for i in interfaces}
    names = [i["name"] for i in interfaces]
    for variable in IFNAME_VARIABLES:
        spec = env.get(variable, "")
        if spec.strip():
            matched = match_ifname_spec(variable, spec, names)
            chosen = by_name[matched[0]] if matched else None
            return _chosen(chosen, f"{variable}={spec}")
    for interface in interfaces:
        if interface["name"].startswith("ib") and interface["up"] and interface["addresses"]:
            return _chosen(interface, "first UP ib* interface with an address")
    source = route_source(master_addr)
    for interface in interfaces:
        if source and source in interface["addresses"]:
            return _chosen(interface, f"route to MASTER_ADDR {master_addr}", address=source)
    return _chosen(None, f"no ib* interface and no route to MASTER_ADDR {master_addr}")


def _chosen(interface: dict[str, Any] | None, source: str, address: str = "") -> dict[str, Any]:
    if interface is None:
        return {"name": "", "source": source, "address": "", "up": False, "mtu": 0}
    return {
        "name": interface["name"],
        "source": source,
        "address": address or _ipv4_first(interface["addresses"]),
        "up": interface["up"],
        "mtu": interface["mtu"],
    }


def resolve_master(master_addr: str) -> dict[str, Any]:
    """What MASTER_ADDR resolves to on this rank: sorted addresses, or the resolver's error."""
    try:
        literal = ipaddress.ip_address(master_addr)
        return {"name": master_addr, "addresses": [master_addr], "loopback": literal.is_loopback}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(master_addr, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        return {"name": master_addr, "addresses": [], "error": f"{type(exc).__name__}: {exc}"}
    addresses = sorted({str(info[4][0]).split("%")[0] for info in infos})
    loopback = all(ipaddress.ip_address(a).is_loopback for a in addresses)
    return {"name": master_addr, "addresses": addresses, "loopback": loopback}


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.network: interfaces, IB ports, socket-ifname variables, chosen interface, MASTER_ADDR."""
    env = dict(os.environ)
    interfaces = read_interfaces()
    names = [i["name"] for i in interfaces]
    facts.network["interfaces"] = interfaces
    facts.network["ib_devices"] = read_ib_devices(options.sysfs_root)
    facts.network["socket_ifnames"] = {
        variable: {
            "spec": env[variable],
            "entries": _entries(variable, env[variable]),
            "matches": match_ifname_spec(variable, env[variable], names),
        }
        for variable in IFNAME_VARIABLES
        if variable in env
    }
    facts.network["chosen_interface"] = choose_interface(interfaces, env, facts.world.master_addr)
    facts.network["master_addr"] = resolve_master(facts.world.master_addr)
    if "MASTER_ADDR" in env and not env["MASTER_ADDR"].strip():
        # World resolution took the default; torch's env:// rendezvous rejects an empty value.
        facts.network["master_addr"]["set_empty"] = True
