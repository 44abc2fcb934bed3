"""Probe measurements: one collective on one group at one size, and their per-dimension summary."""

from __future__ import annotations

import statistics

from msgspec import Struct, field

MAX_MESSAGE_BYTES = 2**36  # 64 GiB: no collective probe message is larger (--sizes' bound too)


class ProbeStep(Struct):
    """Which collective, on which group of which mesh dimension, at which size.

    The identity every probe record shares (a rank's measurement, the group's result, a
    straggler, a hang), declared once: they extend it, so their JSON stays flat.
    """

    dim: str
    op: str
    size_bytes: int
    group_index: int  # -1: not one group (the control barrier, the whole world)
    ranks: list[int]

    def __post_init__(self) -> None:
        # A loaded report or a peer's record is refused here (the codec's one line), not where a
        # renderer turns a 400-digit size into a float.
        if not 0 <= self.size_bytes <= MAX_MESSAGE_BYTES:
            raise ValueError(f"size_bytes {str(self.size_bytes)[:24]} is outside 0..{MAX_MESSAGE_BYTES}")

    @property
    def group_key(self) -> tuple[str, str, int]:
        """(dim, op, group): the same group's records across sizes."""
        return (self.dim, self.op, self.group_index)


class ProbeResult(ProbeStep):
    """One collective, on one group of one mesh dimension, at one message size."""

    hosts: list[str]
    time_s: float  # the group's time per op: its slowest rank's
    algbw_gbps: float
    busbw_gbps: float
    rank_times_s: dict[int, float] = field(default_factory=dict)
    verified: bool = True
    wrong_ranks: list[int] = field(default_factory=list)  # ranks whose output was wrong
    bad_sources: list[int] = field(default_factory=list)  # ranks whose data arrived wrong
    nominal_gbps: float | None = None  # the group's link rate, where readable (probes/nominal.py)
    nominal_source: str = ""  # e.g. "NVLink4 x18", "mlx5_0 port 1 400 Gb/sec (4X NDR)"
    # The group's busbw per timed iteration (its slowest rank's time in each): the spread the
    # straggler rule weighs (probes/judge.py); one figure when iterations were not timed apart.
    iter_busbw_gbps: list[float] = field(default_factory=list)
    # Where the dimension's expected busbw came from (probes/expectations.py): a profile's
    # name, "--expect", or "" (none), and that figure in GB/s.
    expected_gbps: float | None = None
    expected_source: str = ""


class ProbeDevice(Struct):
    """The backend one rank's probes ran on and the GPU it bound (session.bind_device), for the report."""

    rank: int
    host: str
    backend: str  # nccl | gloo: what was used, never "auto"
    index: int | None = None  # CUDA ordinal in that rank's process
    name: str = ""
    pci_bus_id: str = ""
    uuid: str = ""


class ProbeSummary(Struct):
    """One dimension x op x size over all its groups: busbw min/median/max, median algbw, the slowest group."""

    dim: str
    op: str
    size_bytes: int
    groups: int
    busbw_min_gbps: float
    busbw_median_gbps: float
    busbw_max_gbps: float
    slowest_group: int
    slowest_ranks: list[int]
    slowest_hosts: list[str]
    time_s: float  # the slowest group's time per op
    verified: bool
    nominal_gbps: float | None = None  # the slowest group's link rate, where readable
    expected_gbps: float | None = None  # the slowest group's expectation and where it came from
    expected_source: str = ""  # "--expect", "profile <name>", or "" (none)
    # algbw (bytes / time, as nccl-tests prints beside busbw), median over the groups
    algbw_median_gbps: float = 0.0


def summarize_probes(results: list[ProbeResult]) -> list[ProbeSummary]:
    """Per dimension x op x size, in the order the probes ran. Derived: never stored twice."""
    grouped: dict[tuple[str, str, int], list[ProbeResult]] = {}
    for result in results:
        grouped.setdefault((result.dim, result.op, result.size_bytes), []).append(result)
    out = []
    for (dim, op, size), members in grouped.items():
        slowest = min(members, key=lambda r: r.busbw_gbps)
        figures = [r.busbw_gbps for r in members]
        out.append(ProbeSummary(dim, op, size, len(members), min(figures), statistics.median(figures),
                                max(figures), slowest.group_index, list(slowest.ranks), list(slowest.hosts),
                                slowest.time_s, all(r.verified for r in members), slowest.nominal_gbps,
                                slowest.expected_gbps, slowest.expected_source,
                                statistics.median(r.algbw_gbps for r in members)))
    return out
