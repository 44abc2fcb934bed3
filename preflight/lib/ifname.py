"""NCCL's interface-name syntax, as a pure function both the config and network checks use.

NCCL_SOCKET_IFNAME (and NCCL_IB_HCA, which uses the same rules) is a comma list of name
prefixes. A leading `^` inverts it (use every interface *except* those), and a leading `=`
(after the `^`, if any) makes the names exact instead of prefixes: `^=docker0` excludes
exactly `docker0`. Entries may carry a `:port` suffix, which does not take part in matching.
This mirrors NCCL's `ncclFindInterfaces` / `matchIfList`.

GLOO_SOCKET_IFNAME is simpler: a comma list of exact names (`gloo_socket_ifnames`).
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import Struct


class IfnameSpec(Struct, frozen=True):
    """A parsed NCCL interface list."""

    exclude: bool
    exact: bool
    names: tuple[str, ...]


def parse_spec(spec: str) -> IfnameSpec:
    """Parse `^=eth0,ib` style text. Raises ValueError on an empty entry (`eth0,,ib0`)."""
    text = spec.strip()
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    exact = text.startswith("=")
    if exact:
        text = text[1:]
    names: list[str] = []
    if text.strip():
        for item in text.split(","):
            name = item.strip().split(":", 1)[0].strip()
            if not name:
                raise ValueError(f"{spec!r} has an empty entry")
            names.append(name)
    return IfnameSpec(exclude, exact, tuple(names))


def match_interfaces(spec: str, names: Sequence[str]) -> list[str]:
    """The interfaces of `names` that an NCCL_SOCKET_IFNAME value `spec` selects, in order.

    >>> match_interfaces("ib", ["lo", "eth0", "ib0", "ib1"])
    ['ib0', 'ib1']
    >>> match_interfaces("^lo,docker", ["lo", "eth0", "docker0"])
    ['eth0']
    >>> match_interfaces("=eth0", ["eth0", "eth01"])
    ['eth0']

    Raises ValueError for a list with an empty entry.
    """
    parsed = parse_spec(spec)

    def listed(name: str) -> bool:
        if parsed.exact:
            return name in parsed.names
        return any(name.startswith(prefix) for prefix in parsed.names)

    return [name for name in names if listed(name) != parsed.exclude]


def match_gloo_interfaces(spec: str, names: Sequence[str]) -> list[str]:
    """The interfaces a GLOO_SOCKET_IFNAME value selects: exact names, comma separated."""
    wanted = [item.strip() for item in spec.split(",")]
    if any(not item for item in wanted):
        raise ValueError(f"{spec!r} has an empty entry")
    return [name for name in names if name in wanted]
