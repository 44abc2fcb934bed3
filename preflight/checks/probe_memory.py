"""Collective steps skipped alike on every rank: too little device memory free (BW014), or a rank bound to
a MIG instance where NCCL cannot run them (BW015)."""

from __future__ import annotations

from collections.abc import Iterable

from preflight.model import Severity
from preflight.model.probe_skips import MigRank, Skipped
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


@engine_check(
    "BW015",
    tag=Tags.PROBE,
    severity=Severity.COULD_NOT_RUN,
    hint="Collectives across GPUs need whole GPUs: run the job (and preflight) on GPUs with MIG disabled, or "
    "pass --skip probe on MIG and keep the device probes (--only gpu-probe).",
)
def collectives_not_on_mig(found: list[MigRank]) -> Iterable[Problem]:
    """The collectives were not attempted on NCCL because a rank's GPU is a MIG instance.

    A MIG instance has no CUDA IPC, so no NVLink / NVSwitch peer-to-peer, and two instances of one GPU
    share its PCI bus id: NCCL's collectives across MIG instances would fail, hang or time a path that is
    not the job's. Every rank reads every rank's bound device before the first step and, when any is a MIG
    instance, all skip every collective alike; the device probes still measure each instance. Nothing about
    the collectives is known: this is could-not-run, never a pass.
    """
    if not found:
        return
    yield Problem(f"collectives not measured: {_mig_reason(found)}", ranks=[m.rank for m in found],
                  hosts=sorted({m.host for m in found}),
                  data={"mig_instances": [{"rank": m.rank, "host": m.host, "instance": m.instance} for m in found]})


def _mig_reason(found: list[MigRank]) -> str:
    """Why the collectives were not attempted, naming the ranks, hosts and instances."""
    shown = ", ".join(f"rank {m.rank} on {m.host} ({m.instance})" for m in found[:4])
    more = f" and {len(found) - 4} more" if len(found) > 4 else ""
    return (f"{len(found)} rank(s) bound to a MIG instance: {shown}{more}; NCCL's peer transports need CUDA IPC, "
            "which MIG instances do not have, so the collectives were not attempted on NCCL")
