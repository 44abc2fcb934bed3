"""What rank 0's judgement of the probes found: a hung step, a straggling group.

Plain data built by preflight/probes/ (collect.diagnose_hang, judge.stragglers) and handed,
whole, to the engine checks that report them (checks/probe_findings.py).
"""

from __future__ import annotations

from msgspec import Struct

from preflight.model.probe_results import ProbeStep


class Hang(ProbeStep):
    """A step that did not finish: the group, and who was not in it with its peers."""

    step: int  # its index in the plan; -1 when ranks sent no results at all
    waiting: list[int]  # ranks stuck in the step until the deadline
    culprits: dict[int, str]  # rank -> why it is blamed
    phase: str
    elapsed_s: float
    failed: bool = False  # the op raised instead of timing out
    reason: str = ""
    # A rank's step raised unexpectedly (a TypeError, an op this torch lacks): the step could
    # not run, which says nothing about the link; reported as could-not-run (BW009), not BW002.
    could_not_run: bool = False


class Straggler(ProbeStep):
    """A group well below its siblings at the largest size."""

    hosts: list[str]
    busbw_gbps: float
    siblings_median_gbps: float
    # The dispersion test (judge.stragglers): the group's fastest iteration and its siblings'
    # slowest, in GB/s, and the chance of a separation this complete from noise alone.
    best_iter_gbps: float = 0.0
    siblings_worst_iter_gbps: float = 0.0
    false_alarm_p: float = 1.0
    iters: int = 0  # the group's timed figures in this pass (one per call in the first)
    # The confirming pass (a second measurement of the same step), when one ran.
    confirm_busbw_gbps: float | None = None
    confirm_siblings_median_gbps: float | None = None
    confirm_calls: int = 0  # how many calls the confirming pass timed (confirm.CALLS_PER_FIGURE a figure)

    @property
    def ratio(self) -> float:
        """busbw / siblings' median."""
        return self.busbw_gbps / self.siblings_median_gbps if self.siblings_median_gbps else 0.0


class Confirmed(Struct):
    """A suspect measured again alone: its pair, both passes' fractions and the reference."""

    pair: tuple[int, int]
    first_fraction: float  # pass 1 (round robin): its bandwidth / the median of all pairs
    fraction: float  # pass 2: its median / the reference pairs' median
    gbps: float
    reference_gbps: float
    false_alarm_p: float
