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
instances, and why (BW015). The device probes (one rank's own instance) still run. Before that,
as the session opens, no NCCL communicator is made eagerly on such a run (eager_nccl): none would
be used, and its creation on a MIG instance is the first thing that would fail.

Not gloo instead, under `--backend auto` either: auto chose NCCL because every rank has a GPU,
and a gloo plan moves the whole measurement, device probes included, onto the CPU: figures of
another device and another path, which the user did not ask about.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from preflight.channel import keys
from preflight.channel.board import BadValue
from preflight.lib.waiting import wait_until
from preflight.model.messages import BoundRecord
from preflight.model.probe_skips import MigRank
from preflight.probes.timing import barrier


def is_mig(uuid: str) -> bool:
    """True for a MIG instance's UUID (torch and NVML name an instance MIG-..., a whole GPU GPU-...)."""
    return uuid.startswith("MIG-")


def on_mig(board: Any, world_size: int, kept: Callable[[Any], Any] = lambda value: value) -> list[MigRank]:
    """The ranks whose `dev/<rank>` names a MIG instance, among those in the store now (kept: how a
    value that does not decode is set aside, Session.kept)."""
    found = []
    for rank in range(world_size):
        record = kept(board.read(keys.BOUND.at(rank), rank))
        if isinstance(record, BoundRecord) and record.device is not None and is_mig(record.device.uuid):
            found.append(MigRank(rank, record.host, record.device.uuid))
    return found


def eager_nccl(board: Any, world_size: int, timeout_s: float) -> bool:
    """Whether the NCCL communicator may be made at init_process_group (device_id): not when any rank is
    on a MIG instance, where no collective will run on NCCL, so none is ever made. Every rank put its
    `dev/<rank>` right after binding; this waits (bounded) for all of them, so every rank decides alike
    (an eager init is itself a collective: one rank eager and another lazy would wait for each other).
    Not all in by timeout_s: eager, as before, and the set-up's own deadline names who is behind."""
    every = [keys.BOUND.at(rank) for rank in range(world_size)]
    if not wait_until(lambda: board.has_all(every), timeout_s):
        return True
    return not on_mig(board, world_size, kept=lambda v: None if isinstance(v, BadValue) else v)


def mig_ranks(session: Any, deadline: float) -> list[MigRank]:
    """The ranks bound to a MIG instance when the collectives would run on NCCL (else none); the same
    list on every rank. Waits on the control group first: every rank's `dev/<rank>` is in by then."""
    if session.backend != "nccl":
        return []
    barrier(session.control, deadline)
    return on_mig(session.board, session.world.world_size, kept=session.kept)


