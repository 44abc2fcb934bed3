"""Collective steps skipped because the ranks' devices had too little memory free (BW014)."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.model import Severity
from preflight.probes.memory_fit import Skipped
from preflight.registry import Problem, Tags, engine_check


@engine_check(
    "BW014",
    tag=Tags.PROBE,
    severity=Severity.INFO,
    hint="Run preflight before the trainer fills the GPU (or with smaller --sizes): the skipped sizes were "
    "not measured, and nothing about them is known.",
)
def probe_steps_skipped(skipped: list[Skipped]) -> Iterable[Problem]:
    """A collective step was skipped on every rank: its buffers would not fit the device memory the ranks
    had free (preflight.check inside a trainer that holds most of its GPU).

    Before the collectives every rank reads its device's free memory and the ranks agree on the least;
    a step whose buffers (send and receive, twice over for the check's values and NCCL's staging) would
    take more than half of it is skipped alike on every rank, never allocated into an out-of-memory
    error that would read as a failed or hung collective. The other sizes are measured as usual.
    """
    if not skipped:
        return
    shown = "; ".join(s.reason for s in skipped[:4]) + (f"; and {len(skipped) - 4} more" if len(skipped) > 4 else "")
    yield Problem(f"{len(skipped)} collective step(s) skipped for lack of free device memory: {shown}",
                  data={"skipped": [{"dim": s.dim, "op": s.op, "size_bytes": s.size} for s in skipped]})
