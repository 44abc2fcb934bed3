"""Step 8's device probes: every rank measures its own device, rank 0 judges them all.

Called by orchestrate.run_probes once the session is open (the GPU bound, the process group
formed) and before the collectives: `measure` on every rank (after one barrier, so that all
devices work at the same time, as they will in training), `lead` on rank 0 after the
collectives, when every rank's report is in the store. The family runs in a bounded thread
(liveness.bounded): a device that never finishes its work is could-not-run on that rank
(DEV009) and the rank goes on to the collectives, which name it again if it hangs them.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from preflight.channel import keys
from preflight.channel.liveness import RankLiveness
from preflight.checks.device_probe import (
    below_expected,
    below_sku_peak,
    copy_slow,
    device_could_not_run,
    host_link_slow,
    matrix_slow,
    result_differs,
    result_unrepeatable,
    throttled_under_load,
)
from preflight.lib.errors import BadInput, one_line
from preflight.lib.host_turns import job_identity, machine_id
from preflight.lib.numbers import ascii_int
from preflight.model import CheckOutcome, Finding
from preflight.model.device_probe import DeviceReport, DeviceRow
from preflight.options import RunOptions
from preflight.probes import liveness
from preflight.probes.device import judge as device_judge
from preflight.probes.device import store as device_store
from preflight.probes.device.boundary import cpu_model, open_device
from preflight.probes.device.family import DEFAULT_BUDGET_S, run_family
from preflight.probes.levels import LEVELS
from preflight.probes.timing import barrier

# On top of three times the budget: allocations, pinning host memory, cuBLAS's first call. A device
# still busy after that is stuck (DEV009), and the rank goes on.
GRACE_S = 20.0
SLOW_CHECKS = {"gemm": matrix_slow, "copy": copy_slow, "h2d": host_link_slow, "d2h": host_link_slow}


def _software() -> str:
    import torch

    return f"torch {torch.__version__}" + (f" cuda {torch.version.cuda}" if torch.version.cuda else "")


def _budget(options: RunOptions, kind: str) -> float:
    if options.device.budget_s is not None:
        return options.device.budget_s
    return LEVELS[options.probes.level].device_budget_s.get(kind, DEFAULT_BUDGET_S.get(kind, 1.0))


def elect(board: Any, rank: int, host: str, uuid: str) -> int:
    """The rank that measures this rank's GPU: the first of the ranks bound to the same UUID on this host to
    ask (Board.agree); this rank itself when it has no UUID (a CPU, or a GPU that reports none)."""
    if not uuid:
        return rank
    won = board.agree(keys.GPU_SEAT.at(host, uuid), str(rank)).decode("ascii", "replace")
    try:
        return ascii_int(won, "gpu seat", maximum=1 << 31)
    except BadInput:  # a value nobody of this run wrote: measure rather than trust it
        return rank


def _on_device(session: Any, call: Any) -> Any:
    """call() in this (new) thread with the session's GPU as its current device: a thread starts on
    device 0, and CUDA events and the default stream act on the current device."""
    session.enter_device()
    return call()


def measure(session: Any, options: RunOptions, watch: RankLiveness, device: Any = None) -> DeviceReport:
    """Run the family on this rank's own device and publish its report (never raises).

    device: the boundary to measure (boundary.TorchDevice by default; tests pass the
    data-driven fake).
    """
    world, bound = session.world, session.bound
    kind = session.kind
    report = DeviceReport(world.rank, world.host, kind, software=_software(), machine=machine_id())
    if bound is not None:
        report.name, report.index, report.uuid = bound.name, bound.index, bound.uuid
        report.pci_bus_id = bound.pci_bus_id
    else:
        report.name = cpu_model()
    budget = _budget(options, kind)
    deadline_s = budget * 3 + options.device.sustain_s + GRACE_S
    began = time.monotonic()
    try:
        barrier(session.control, time.monotonic() + session.timeout_s)  # every device starts together
        owner = elect(session.board, world.rank, world.host, bound.uuid if bound else "")
        if owner != world.rank:  # MPS, or two ranks on device 0: each would measure half a GPU
            why = f"shares GPU {bound.uuid if bound else '?'} with rank {owner}, which measures it for both"
            report.shared_with, report.skipped = owner, dict.fromkeys(("every figure",), why)
            report.elapsed_s = time.monotonic() - began
            device_store.publish(session.board, report)
            return report
        def open_and_run() -> Any:
            # Opening is inside the bound too: nvmlInit on a driver that stopped answering blocks for
            # minutes (the hang nvidia-smi shows), and the device is then named, not waited for.
            opened = device or open_device(kind, bound.index if bound else None, bound.pci_bus_id if bound else "",
                                           cuda=session.cuda, deadline_s=deadline_s, uuid=bound.uuid if bound else "",
                                           sysfs_root=options.sysfs_root, host=world.host,
                                           job=job_identity(world.job_id, world.master_addr, world.master_port))
            report.serial = opened.serial() if kind == "cuda" else ""
            run_family(opened, report, budget, options.device.sustain_s)
            return opened

        # The family's thread is done: its cached blocks and NVML go back.
        liveness.bounded(lambda: _on_device(session, open_and_run), deadline_s, watch).close()
    except liveness.StillRunning as exc:
        # The abandoned thread still fills `report`: send a copy of what it was, and this reason only.
        report = msgspec.structs.replace(report, measured=[], samples=[], skipped={},
                                     errors={"every figure": f"did not finish within {deadline_s:g}s ({exc})"})
        session.abandoned = True  # the device may still be busy: no clean teardown
    except Exception as exc:  # the barrier timed out, the device could not be opened
        report.errors["every figure"] = f"{type(exc).__name__}: {one_line(exc)}"[:300]
    report.elapsed_s = time.monotonic() - began
    device_store.publish(session.board, report)
    return report


def lead(session: Any, options: RunOptions, watch: RankLiveness,
         hosts: dict[int, str]) -> tuple[list[DeviceRow], list[Finding]]:
    """Rank 0: every rank's report, judged; the rows for the report and the findings (outcomes() lists
    every device check for the JUnit report, passed or not)."""
    world = session.world
    wait_s = session.timeout_s + _budget(options, session.kind) * 3 + options.device.sustain_s + GRACE_S
    reports, missing = device_store.gather(session.board, world.world_size, wait_s, dead=watch.dead)
    missing = {r: why for r, why in missing.items() if r not in watch.dead()}  # RUN008 names the dead
    judged = device_judge.judge(reports, missing, hosts, options.device.expect)
    return judged.rows, findings(judged)


ALL_CHECKS = (result_differs, result_unrepeatable, matrix_slow, copy_slow, host_link_slow, below_sku_peak,
              below_expected, throttled_under_load, device_could_not_run)


def outcomes(found: list[Finding]) -> list[CheckOutcome]:
    """One outcome per device check: its worst finding's severity, OK when it found nothing."""
    return [check.outcome(found) for check in ALL_CHECKS]


def findings(judged: device_judge.Judged) -> list[Finding]:
    """The checks' findings for what rank 0 concluded."""
    out: list[Finding] = []
    for differs in judged.differs:
        out += result_differs.report(differs)
    for row in judged.unrepeatable:
        out += result_unrepeatable.report(row)
    for slow in judged.slow:
        out += SLOW_CHECKS["gemm" if slow.figure.startswith("gemm") else slow.figure].report(slow)
    for below in judged.below:
        out += (below_expected if below.expected else below_sku_peak).report(below)
    for throttled in judged.throttled:
        out += throttled_under_load.report(throttled)
    for rank, host, figure, why in judged.could_not_run:
        out += device_could_not_run.report(rank=rank, host=host, figure=figure, why=why)
    return out
