"""The data every stage passes on: severities, findings, per-rank facts and the JobReport.

Everything here is plain data that round-trips through JSON, so a report written by one
run can be re-rendered later and a rank's payload can cross the store unchanged.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any


class Severity(str, enum.Enum):
    """How bad a finding is. COULD_NOT_RUN is never a pass: the check did not answer."""

    OK = "ok"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"
    COULD_NOT_RUN = "could-not-run"

    @property
    def rank(self) -> int:
        """Order for "worst of": ok < info < warn < could-not-run < error."""
        return _SEVERITY_ORDER[self]


_SEVERITY_ORDER = {
    Severity.OK: 0,
    Severity.INFO: 1,
    Severity.WARN: 2,
    Severity.COULD_NOT_RUN: 3,
    Severity.ERROR: 4,
}


class ExitCode(enum.IntEnum):
    """The verdict as a process exit status, the same on every rank."""

    PASSED = 0
    WARNINGS_STRICT = 1
    BAD_INPUT = 2
    FAILED = 3
    INCOMPLETE = 4


@dataclass
class Finding:
    """One thing a check found: stable id, severity, a one-line message and what to do."""

    check_id: str
    severity: Severity
    message: str
    hint: str = ""
    ranks: list[int] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    blames_host: bool = False  # its check blames the hosts it names (the verdict's exclude list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["severity"] = self.severity.value
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Finding:
        """Inverse of to_dict; raises ValueError/KeyError/TypeError on a malformed payload."""
        return cls(
            check_id=str(raw["check_id"]),
            severity=Severity(raw["severity"]),
            message=str(raw["message"]),
            hint=str(raw.get("hint", "")),
            ranks=[int(r) for r in raw.get("ranks", [])],
            hosts=[str(h) for h in raw.get("hosts", [])],
            data=dict(raw.get("data", {})),
            blames_host=bool(raw.get("blames_host", False)),
        )


@dataclass
class World:
    """Where this rank sits in the job, as the launcher described it."""

    launcher: str
    rank: int
    world_size: int
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    num_nodes: int = 1
    host: str = ""
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    job_id: str = ""
    run_id: str = ""
    restart_count: int = 0
    # Torchrun's agent already hosts a store at master_addr:master_port; join it instead.
    use_agent_store: bool = False
    # The launcher's placement: expected host for every rank, where it says (Slurm, torchrun).
    expected_hosts: dict[int, str] = field(default_factory=dict)
    # The raw variables each decision came from, and how it was made.
    raw: dict[str, str] = field(default_factory=dict)
    decisions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (expected_hosts keys become strings)."""
        out = dataclasses.asdict(self)
        out["expected_hosts"] = {str(k): v for k, v in self.expected_hosts.items()}
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> World:
        """Inverse of to_dict."""
        data = dict(raw)
        data["expected_hosts"] = {int(k): str(v) for k, v in raw.get("expected_hosts", {}).items()}
        return cls(**data)


@dataclass
class RankFacts:
    """What one rank saw locally. Sections are plain dicts filled by the fact gatherers."""

    rank: int
    host: str
    world: World
    env: dict[str, str] = field(default_factory=dict)  # redacted: secrets are "<redacted>:<hash>"
    versions: dict[str, str] = field(default_factory=dict)
    system: dict[str, Any] = field(default_factory=dict)  # limits, /dev/shm, cpu count, ...
    network: dict[str, Any] = field(default_factory=dict)  # interfaces, IB ports, chosen ifname
    gpus: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # results of rank-side probes of peers
    gather_errors: dict[str, str] = field(default_factory=dict)  # gatherer name -> why it failed

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["world"] = self.world.to_dict()
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RankFacts:
        """Inverse of to_dict."""
        data = dict(raw)
        data["world"] = World.from_dict(raw["world"])
        return cls(**data)


@dataclass
class CheckOutcome:
    """That a check ran (or could not), so reports can list passes too (JUnit testcases)."""

    check_id: str
    tag: str
    scope: str
    title: str
    status: Severity  # worst severity it produced; OK when silent
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["status"] = self.status.value
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CheckOutcome:
        """Inverse of to_dict."""
        data = dict(raw)
        data["status"] = Severity(raw["status"])
        return cls(**data)


@dataclass
class ProbeResult:
    """One collective, on one group of one mesh dimension, at one message size."""

    dim: str
    op: str
    size_bytes: int
    group_index: int
    ranks: list[int]
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out = dataclasses.asdict(self)
        out["rank_times_s"] = {str(k): v for k, v in self.rank_times_s.items()}
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ProbeResult:
        """Inverse of to_dict."""
        data = dict(raw)
        data["rank_times_s"] = {int(k): float(v) for k, v in raw.get("rank_times_s", {}).items()}
        return cls(**data)


@dataclass
class ProbeSummary:
    """One dimension x op x size over all its groups: busbw min/median/max and the slowest group."""

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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)


def summarize_probes(results: list[ProbeResult]) -> list[ProbeSummary]:
    """Per dimension x op x size, in the order the probes ran. Derived: never stored twice."""
    import statistics

    grouped: dict[tuple[str, str, int], list[ProbeResult]] = {}
    for result in results:
        grouped.setdefault((result.dim, result.op, result.size_bytes), []).append(result)
    out = []
    for (dim, op, size), members in grouped.items():
        slowest = min(members, key=lambda r: r.busbw_gbps)
        figures = [r.busbw_gbps for r in members]
        out.append(ProbeSummary(dim, op, size, len(members), min(figures), statistics.median(figures),
                                max(figures), slowest.group_index, list(slowest.ranks), list(slowest.hosts),
                                slowest.time_s, all(r.verified for r in members), slowest.nominal_gbps))
    return out


@dataclass
class ReportMeta:
    """Who ran, where, when, with what."""

    launcher: str
    job_id: str
    run_id: str
    world_size: int
    num_nodes: int
    master_addr: str
    master_port: int
    restart_count: int = 0
    mesh: str = ""
    backend: str = ""
    command_line: str = ""
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)  # phase name -> seconds
    expected_busbw_gbps: dict[str, float] = field(default_factory=dict)  # --expect, per dimension

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ReportMeta:
        """Inverse of to_dict."""
        return cls(**raw)


@dataclass
class JobReport:
    """The one source every renderer reads: the whole run, on rank 0."""

    meta: ReportMeta
    ranks: list[RankFacts] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    checks: list[CheckOutcome] = field(default_factory=list)
    probes: list[ProbeResult] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    bad_hosts: list[str] = field(default_factory=list)
    verdict: str = "incomplete"
    exit_code: int = int(ExitCode.INCOMPLETE)
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; `JobReport.from_dict(r.to_dict()) == r`."""
        return {
            "schema": 1,
            "meta": self.meta.to_dict(),
            "ranks": [r.to_dict() for r in self.ranks],
            "findings": [f.to_dict() for f in self.findings],
            "checks": [c.to_dict() for c in self.checks],
            "probes": [p.to_dict() for p in self.probes],
            "probe_summary": [s.to_dict() for s in summarize_probes(self.probes)],  # derived from probes
            "missing_ranks": list(self.missing_ranks),
            "bad_hosts": list(self.bad_hosts),
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "why": self.why,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> JobReport:
        """Inverse of to_dict."""
        return cls(
            meta=ReportMeta.from_dict(raw["meta"]),
            ranks=[RankFacts.from_dict(r) for r in raw.get("ranks", [])],
            findings=[Finding.from_dict(f) for f in raw.get("findings", [])],
            checks=[CheckOutcome.from_dict(c) for c in raw.get("checks", [])],
            probes=[ProbeResult.from_dict(p) for p in raw.get("probes", [])],
            missing_ranks=[int(r) for r in raw.get("missing_ranks", [])],
            bad_hosts=[str(h) for h in raw.get("bad_hosts", [])],
            verdict=str(raw.get("verdict", "incomplete")),
            exit_code=int(raw.get("exit_code", ExitCode.INCOMPLETE)),
            why=str(raw.get("why", "")),
        )

    def worst(self) -> Severity:
        """The worst severity among the findings (OK when there are none)."""
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=Severity.OK)
