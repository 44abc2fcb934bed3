"""Step 8's outcome (the probes) on one rank: what rank 0 judged, and what this rank left behind."""

from __future__ import annotations

from msgspec import Struct, field

from preflight.model.device_probe import DeviceRow
from preflight.model.findings import CheckOutcome, Finding
from preflight.model.nccl_account import NcclAccount, NcclSummary
from preflight.model.probe_results import ProbeDevice, ProbeResult


class ProbeOutcome(Struct):
    """Results and findings of the probes (filled on rank 0 only), and what this rank left behind."""

    results: list[ProbeResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    backend: str = ""  # the backend the probes really used ("" when none formed)
    backend_reason: str = ""  # why auto chose it (a GPU job on gloo says which rank could not bind a GPU)
    devices: list[ProbeDevice] = field(default_factory=list)  # rank 0: every rank's backend and bound GPU
    device_ids: dict[int, str] = field(default_factory=dict)  # rank 0: rank -> its GPU's PCI bus id or UUID
    device_rows: list[DeviceRow] = field(default_factory=list)  # rank 0: every device figure (probes/device/run.py)
    device_outcomes: list[CheckOutcome] = field(default_factory=list)  # rank 0: every device check, for JUnit
    # A collective of this rank never finished: its communicator must not be destroyed, and the
    # process must leave by os._exit once the verdict is out (a gloo group's destructor would
    # join the thread still inside it and hang the process at interpreter exit).
    left_pending: bool = False
    # rank 0: every rank's NCCL account (probes/nccl_capture.py), the ranks without one and why,
    # and the report's summary per host profile and mesh dimension (lib/nccl_summary.py)
    nccl_accounts: dict[int, NcclAccount] = field(default_factory=dict)  # ranks that said the same share one
    nccl_hosts: dict[int, str] = field(default_factory=dict)  # rank -> host (the shared accounts name none)
    nccl_missing: dict[int, str] = field(default_factory=dict)
    nccl: NcclSummary | None = None
