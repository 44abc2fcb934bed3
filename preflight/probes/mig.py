"""The collectives are not attempted on NCCL when a rank is bound to a MIG instance.

A MIG instance is walled off from its GPU's other instances and from other GPUs: CUDA IPC, and with
it NVLink / NVSwitch peer-to-peer, is not available to it (RAPIDS' MIG guide,
https://docs.rapids.ai/deployment/stable/guides/mig: "the lack of support for CUDA Inter-Process
Communication (IPC) ... When using MIG, NVLink and NVSwitch are thus completely unavailable"; NVIDIA's
MIG user guide says the same of CUDA IPC across GPU instances, its exact wording not read here).
NCCL's intra-node transports are built on CUDA IPC, and two instances of one GPU share its PCI bus id,
which NCCL's topology reads as one GPU. NCCL 2.32's user guide has a section "Using MIG instances"
(not read here): a newer NCCL may run on them, and then this rule is to be revisited with a GPU.
Measured anyway, the collectives would fail, hang, or time a path that is not a whole GPU's: nothing
a verdict could stand on. So every rank, before the
first step, reads every rank's bound device (`dev/<rank>`, put as its session opened); when any
is a MIG instance the ranks skip every collective step alike (the same records on every rank, so
no rank waits in a collective its peers skipped) and rank 0 reports which ranks, hosts and
instances, and why (BW015). The device probes (one rank's own instance) still run.

Not gloo instead, under `--backend auto` either: auto chose NCCL because every rank has a GPU,
and a gloo plan moves the whole measurement, device probes included, onto the CPU: figures of
another device and another path, which the user did not ask about.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from preflight.channel import keys
from preflight.probes.timing import barrier


@dataclass(frozen=True)
class MigRank:
    """A rank whose probes' GPU is a MIG instance."""

    rank: int
    host: str
    instance: str  # the instance's UUID, MIG-...


def is_mig(uuid: str) -> bool:
    """True for a MIG instance's UUID (torch and NVML name an instance MIG-..., a whole GPU GPU-...)."""
    return uuid.startswith("MIG-")


def mig_ranks(session: Any, deadline: float) -> list[MigRank]:
    """The ranks bound to a MIG instance when the collectives would run on NCCL (else none); the same
    list on every rank. Waits on the control group first: every rank's `dev/<rank>` is in by then."""
    if session.backend != "nccl":
        return []
    barrier(session.control, deadline)
    found = []
    for rank in range(session.world.world_size):
        record = session.kept(session.board.read(keys.BOUND.at(rank), rank))
        if record is not None and record.device is not None and is_mig(record.device.uuid):
            found.append(MigRank(rank, record.host, record.device.uuid))
    return found


def reason(found: list[MigRank]) -> str:
    """Why the collectives were not attempted, naming the ranks, hosts and instances."""
    shown = ", ".join(f"rank {m.rank} on {m.host} ({m.instance})" for m in found[:4])
    more = f" and {len(found) - 4} more" if len(found) > 4 else ""
    return (f"{len(found)} rank(s) bound to a MIG instance: {shown}{more}; NCCL's peer transports need CUDA IPC, "
            "which MIG instances do not have, so the collectives were not attempted on NCCL")
