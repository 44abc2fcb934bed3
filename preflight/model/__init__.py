"""The data every stage passes on: msgspec Structs, JSON through one codec (codec.py).

Structs, not dataclasses: a Struct type is made in C, where Python 3.11 compiles a dataclass's
__init__, __repr__ and __eq__ from source on every import (the ~160 model types were ~0.1 CPU-s
of each rank's first step; docs/performance.md), and rank 0 makes one per rank of several of them.

Everything here round-trips through JSON, so a report written by one run can be re-rendered
later and a rank's payload can cross the store unchanged. Import from here:
`from preflight.model import Finding, RankFacts, JobReport`.
"""

from preflight.model.findings import CheckOutcome, ExitCode, Finding, Severity, culprit_order
from preflight.model.health_facts import GpuFabric, GpuHealth, GpuProcess, HealthFacts, IbCounters, NvLinkHealth
from preflight.model.host_choice import DroppedHost, HostChoice, HostRanking, HostStanding
from preflight.model.job_report import JobReport, ReportMeta
from preflight.model.probe_results import ProbeDevice, ProbeResult, ProbeStep, ProbeSummary, summarize_probes
from preflight.model.rank_facts import (
    ChosenInterface,
    GpuFacts,
    IbPort,
    Interface,
    MasterAddrResolution,
    MasterPortState,
    NetworkFacts,
    PortHolder,
    RankFacts,
    SystemLimits,
    Versions,
    World,
)
from preflight.model.reachability import ReachabilityOutcome, ReachListener, ReachProbe

__all__ = [
    "CheckOutcome", "ChosenInterface", "DroppedHost", "ExitCode", "Finding", "GpuFabric", "GpuFacts", "GpuHealth",
    "GpuProcess", "HealthFacts",
    "HostChoice", "HostRanking", "HostStanding", "IbCounters", "IbPort", "Interface", "JobReport",
    "MasterAddrResolution", "MasterPortState", "NetworkFacts", "NvLinkHealth",
    "PortHolder", "ProbeDevice", "ProbeResult", "ProbeStep", "ProbeSummary",
    "RankFacts", "ReachListener", "ReachProbe", "ReachabilityOutcome",
    "ReportMeta", "Severity", "SystemLimits", "Versions", "World", "culprit_order", "summarize_probes",
]
