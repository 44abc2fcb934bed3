"""The messages that cross the c10d store besides a rank's payload: one type per key family.

Each is written and read only through preflight/channel/board.py with the one codec
(codec.py), so a value that does not fit its type is a `BadValue` naming the rank it came
from, never a KeyError or a TypeError in the code that reads it. Keys: channel/keys.py.
"""

from __future__ import annotations

from msgspec import Struct, field

from preflight.model.findings import ExitCode
from preflight.model.probe_results import ProbeStep
from preflight.model.reachability import ReachProbe


class DeadRanks(Struct):
    """`dead`: the ranks rank 0 knows are gone (its liveness watch), rank -> why."""

    ranks: dict[int, str] = field(default_factory=dict)


class RankLeft(Struct):
    """`left/<rank>`: a rank left the run without the verdict, and why (a signal, its own deadline)."""

    why: str


class BoundDevice(Struct):
    """The GPU a rank's probes run on: CUDA ordinal in this process, and the ids NVML also shows."""

    index: int
    name: str = ""
    pci_bus_id: str = ""  # NVML's form, 00000000:18:00.0
    uuid: str = ""  # NVML's form, GPU-xxxxxxxx-...


class BoundRecord(Struct):
    """`dev/<rank>`: the backend a rank's session runs on and the GPU it bound (None on CPU)."""

    host: str = ""
    backend: str = ""
    device: BoundDevice | None = None


class StepRecord(ProbeStep):
    """What one rank measured in one step (part of `res/<rank>`)."""

    step: int
    times_s: list[float]  # [seconds per op] (elapsed / iters), or one per iteration when asked
    output_ok: bool = True
    bad_sources: list[int] = field(default_factory=list)  # global ranks whose data arrived wrong


class Status(Struct):
    """Where a rank's probing ended: done, or the step and phase where it stopped.

    state: done | timeout | failed (the op or backend raised) | error (an unexpected exception
    inside preflight or torch's Python, e.g. a TypeError: the step could not run, nothing is
    known about the link). phase: connect | barrier | op | verify.
    """

    state: str = "done"
    step: int = -1
    phase: str = ""
    reason: str = ""
    elapsed_s: float = 0.0  # from the step's start to the expiry


class ProbeReport(Struct):
    """`res/<rank>`: a rank's measurements and where its probing ended."""

    host: str = ""
    records: list[StepRecord] = field(default_factory=list)
    status: Status = field(default_factory=Status)
    # Why this rank has no NCCL account (its log not written or unreadable); its account, when it has
    # one, is under its own key (channel/keys.NCCL_ACCOUNT), sent before this report.
    nccl_missing: str = ""


class SetupStage(Struct):
    """`setup/<rank>`: the setup stage a rank has reached, and its host."""

    stage: str
    host: str = ""


class NoGpu(Struct):
    """`no_gpu/<rank>`: why a rank cannot use a GPU."""

    why: str


class RemeasureSteps(Struct):
    """`again`: the steps every rank measures a second time, each figure the mean of that many calls."""

    steps: list[int] = field(default_factory=list)
    calls_per_figure: int = 1  # every rank must time the same calls (probes/confirm.py decides, bounds)


class ConfirmPairs(Struct):
    """`confirm`: the pairs measured again one at a time, in order, each figure the mean of that many calls."""

    pairs: list[tuple[int, int]] = field(default_factory=list)
    calls_per_figure: int = 1


class LocalizePlan(Struct):
    """`localize`: the round robin's ranks ([] for none), and whether group testing may follow."""

    ranks: list[int] = field(default_factory=list)
    hosts: bool = False


class PairTimes(Struct):
    """`pair/<rank>`: a rank's round-robin seconds per iteration, per peer."""

    times: dict[int, list[float]] = field(default_factory=dict)


class PairSamples(Struct):
    """`cpair/<rank>`: a rank's GB/s samples per pair in the confirming pass."""

    samples: list[tuple[int, int, list[float]]] = field(default_factory=list)


class RoundPlan(Struct):
    """`gt/<round>`: group testing's round: the reference ranks and the pools; or done."""

    reference: list[int] = field(default_factory=list)
    pools: list[list[int]] = field(default_factory=list)
    done: bool = False


class RoundTimes(Struct):
    """`gt/<round>/t/<rank>`: a member's per-iteration seconds in the reference and in its pool."""

    reference: list[float] = field(default_factory=list)
    pool: list[float] = field(default_factory=list)


class ReachResult(Struct):
    """`reach/result/<host>`: every connection a host made (`reach/listener/<host>` and
    `reach/roster` carry model/reachability.ReachListener)."""

    host: str
    interface: str = ""
    address: str = ""
    results: list[ReachProbe] = field(default_factory=list)


class Claimant(Struct):
    """`claimant/<rank>/<n>`: who claimed a rank (the n-th claimant): its host and pid."""

    host: str
    pid: int = 0


class OwnerMark(Struct):
    """The owner mark (channel/keys.OWNER, at the store's root): what rank 0 writes into the store it
    hosts, so a joining rank can tell it is its run's.

    `proof`: with a run secret, its HMAC over the run id and world size (channel/run_auth.py)."""

    run_id: str
    world_size: int
    host: str = ""
    pid: int = 0
    proof: str = ""


class GoDecision(Struct):
    """`go`: whether the probes may start, and why; the run's nonce, and with a run secret its proof."""

    go: bool
    reason: str = ""
    nonce: str = ""
    proof: str = ""


class Verdict(Struct):
    """`verdict`: the exit code every rank leaves with; the run's nonce, and with a run secret its proof.

    Validated where it enters: an exit code preflight never gives is not a verdict."""

    exit_code: int
    verdict: str = ""
    nonce: str = ""
    proof: str = ""

    def __post_init__(self) -> None:
        if self.exit_code not in {int(code) for code in ExitCode}:
            raise ValueError(f"exit code {self.exit_code} is not one preflight gives")
