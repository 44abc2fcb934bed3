"""The history's records as plain data: figures, what the rules found, and runs as shown.

The history package (preflight/history/) reads and writes them; the checks
(checks/history_findings.py) and the renderers (reports/history_trends.py, reports/history_html.py) only read them.
"""

from __future__ import annotations

import statistics

from msgspec import Struct, field

FigureKey = tuple[str, str, str, int, int, int]  # kind, dim, op, size_bytes, group_size, group_hosts


class FigureRow(Struct, frozen=True):
    """One measured figure of one subject (a host, or a GPU by UUID) in one run."""

    kind: str  # "collective"; device probes: their own kind, e.g. "hbm_bandwidth"
    subject: str  # the host, or the GPU's UUID
    value: float
    unit: str
    host: str = ""
    gpu_uuid: str = ""
    dim: str = ""
    op: str = ""
    group_index: int = -1
    group_size: int = 0
    group_hosts: int = 0
    size_bytes: int = 0

    @property
    def key(self) -> FigureKey:
        """What makes two runs' figures of one subject comparable: same measurement, same group shape."""
        return (self.kind, self.dim, self.op, self.size_bytes, self.group_size, self.group_hosts)


class OwnPast(Struct, frozen=True):
    """One subject's record for one comparable figure."""

    subject: str
    key: FigureKey
    values: list[float]  # newest first

    @property
    def median(self) -> float:
        """Its typical figure."""
        return statistics.median(self.values)

    @property
    def p10(self) -> float:
        """Its own noise floor: the 10th percentile (nearest rank) of its healthy runs."""
        ordered = sorted(self.values)
        return ordered[max(0, int(0.1 * len(ordered) + 0.5) - 1)]


class Drop(Struct, frozen=True):
    """A figure of this run clearly below its subject's own past: below (1 - margin) x its p10."""

    row: FigureRow
    past: OwnPast
    margin: float

    @property
    def threshold(self) -> float:
        """Below this, the figure is named."""
        return (1 - self.margin) * self.past.p10


class Flaky(Struct, frozen=True):
    """A host that failed in `failed` of its last `runs` recorded runs."""

    host: str
    failed: int
    runs: int
    run_ids: list[str]  # the failed runs' ids, newest first


class HistoryFilters(Struct, frozen=True):
    """Which runs `preflight history` shows: all given filters hold; `last` newest runs at most."""

    host: str = ""
    gpu: str = ""  # a GPU UUID
    check: str = ""  # a check id: runs with a finding of it
    since: float | None = None  # seconds since the epoch
    last: int = 50


class FigureView(Struct):
    """One figure of one subject in one run, as shown."""

    subject: str
    host: str
    gpu_uuid: str
    kind: str
    dim: str
    op: str
    size_bytes: int
    group_size: int
    group_hosts: int
    value: float
    unit: str


class RunView(Struct):
    """One run as `preflight history` shows it (terminal, --json, --html)."""

    run_id: str
    job_id: str
    started_at: str  # ISO 8601, UTC
    verdict: str
    exit_code: int
    world_size: int
    num_nodes: int
    mesh: str
    backend: str
    hosts: list[dict[str, object]] = field(default_factory=list)  # {"host", "failed"}
    gpus: list[dict[str, object]] = field(default_factory=list)  # {"host", "index", "uuid", "serial", "name"}
    findings: list[dict[str, object]] = field(default_factory=list)  # {"check_id", "severity", "message", "hosts"}
    figures: list[FigureView] = field(default_factory=list)
