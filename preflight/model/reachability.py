"""Step 5's outcome (reachability), as rank 0 hands it to the cross checks and the report.

The JSON report's `reachability` object has these fields (the names it always had; `rank`
and `skipped` are now always written, `null` / `false` where they used to be left out, so a
report written before still loads).
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct, field

from preflight.model.codec import BadPayload, from_builtins


class ReachListener(Struct):
    """One host's listener, as published by the rank that speaks for the host."""

    host: str
    address: str = ""  # the chosen interface's address it listens on
    interface: str = ""
    port: int = 0  # 0: no listener
    error: str = ""  # why there is none ("published no listener in time", the bind error)
    rank: int | None = None  # the rank that spoke for the host (None: it published nothing)


class ReachProbe(Struct):
    """One TCP connection from a prober host to a target host's listener."""

    target: str
    address: str = ""
    interface: str = ""
    ok: bool = False
    error: str = ""  # "timed out after 2s", the socket error, "no listener: ..."
    time_s: float = 0.0
    skipped: bool = False  # the target had no listener: nothing was tried


class ReachabilityOutcome(Struct):
    """The roster of listeners, each prober host's results, the hosts that published none in time."""

    roster: list[ReachListener] = field(default_factory=list)
    results: dict[str, list[ReachProbe]] = field(default_factory=dict)  # prober host -> its probes
    missing: list[str] = field(default_factory=list)  # hosts that published no result in time
    k: int = 0  # random peers per host, beyond the two ring neighbours
    connect_timeout_s: float = 0.0

    @classmethod
    def from_collected(cls, roster: list[Any], results: dict[str, Any], missing: list[str], k: int,
                       connect_timeout_s: float) -> ReachabilityOutcome:
        """The typed outcome from what rank 0 gathered; a host whose record cannot be read (a
        foreign or corrupt value) is a host without a listener or without a result, never an error."""
        listeners = []
        for entry in roster:
            try:
                listeners.append(from_builtins(entry, ReachListener))
            except BadPayload as exc:
                host = str(entry.get("host", "?")) if isinstance(entry, dict) else "?"
                listeners.append(ReachListener(host, error=f"its listener record cannot be read: {exc}"[:200]))
        typed: dict[str, list[ReachProbe]] = {}
        unreadable = []
        for host, probes in results.items():
            try:
                typed[host] = from_builtins(probes, list[ReachProbe])
            except BadPayload:
                unreadable.append(host)
        return cls(listeners, typed, sorted({*missing, *unreadable}), k, connect_timeout_s)
