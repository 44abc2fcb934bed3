"""The whole run on rank 0 (JobReport, the one source every renderer reads) and its metadata."""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import Struct, field

from preflight.model.device_probe import DeviceRow
from preflight.model.findings import CheckOutcome, ExitCode, Finding, Severity
from preflight.model.host_choice import HostChoice, HostRanking
from preflight.model.nccl_account import NcclSummary
from preflight.model.probe_results import ProbeDevice, ProbeResult
from preflight.model.rank_facts import RankFacts
from preflight.model.reachability import ReachabilityOutcome
from preflight.model.storage import StorageSection


class ReportMeta(Struct):
    """Who ran, where, when, with what."""

    launcher: str
    job_id: str
    run_id: str
    world_size: int
    num_nodes: int
    master_addr: str
    master_port: int
    restart_count: int = 0
    mesh: str = ""  # the resolved mesh, outermost first, derived dp included (pp2,dp2,tp4); "" without --mesh
    backend: str = ""  # the backend the probes used (nccl/gloo), not the requested "auto"
    backend_reason: str = ""  # why: "--backend nccl", or auto's vote (a GPU job on gloo says which rank, why)
    command_line: str = ""
    started_at: str = ""
    finished_at: str = ""
    duration_s: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)  # phase name -> seconds
    expected_busbw_gbps: dict[str, float] = field(default_factory=dict)  # --expect, per dimension
    run_nonce: str = ""  # this run's own identity, agreed through the store ("" without one; channel/exchange.py)
    # Whether the store's values were proven by a run secret (PREFLIGHT_SECRET in every rank's
    # environment, channel/run_auth.py). False in a report written before the field existed.
    authenticated: bool = False


class JobReport(Struct):
    """The one source every renderer reads: the whole run, on rank 0."""

    meta: ReportMeta
    # A list on rank 0; a loaded report's is read from its rank table (model/table_ranks.py): read-only.
    ranks: Sequence[RankFacts] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    checks: list[CheckOutcome] = field(default_factory=list)
    probes: list[ProbeResult] = field(default_factory=list)
    probe_devices: list[ProbeDevice] = field(default_factory=list)  # per rank: backend used, bound GPU
    device_probes: list[DeviceRow] = field(default_factory=list)  # per rank: its device's figures, judged
    # NCCL's account of the probes' communicators: host profiles, each dimension's transports (None: no NCCL).
    nccl: NcclSummary | None = None
    # Step 5's outcome: the roster of listeners, each prober host's results, hosts with none (None: not run).
    reachability: ReachabilityOutcome | None = None
    # The storage family's outcome (--storage): per host its mount and rates (None: it did not run).
    storage: StorageSection | None = None
    missing_ranks: list[int] = field(default_factory=list)
    bad_hosts: list[str] = field(default_factory=list)
    verdict: str = "incomplete"
    exit_code: int = int(ExitCode.INCOMPLETE)
    why: str = ""
    # Every host best first, for spare nodes (steps/host_choice.py); None in reports written before it.
    host_ranking: HostRanking | None = None
    # The choice of the best N hosts, when one was asked for (`preflight report --keep N`): renderers show it.
    host_choice: HostChoice | None = None

    def __post_init__(self) -> None:
        # `preflight report` exits with the loaded report's code: only one preflight gives.
        if self.exit_code not in {int(code) for code in ExitCode}:
            raise ValueError(f"exit_code {str(self.exit_code)[:24]} is not one preflight gives")

    def keep_hosts(self, count: int) -> HostChoice:
        """Which `count` hosts to train on and which to drop, and why (see HostRanking.keep): for
        trainers that re-form their mesh themselves, and `preflight report --keep`."""
        if self.host_ranking is None:
            return HostChoice(count, False, "this report has no host ranking (written by an older preflight)")
        return self.host_ranking.keep(count)

    def worst(self) -> Severity:
        """The worst severity among the findings (OK when there are none)."""
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=Severity.OK)
