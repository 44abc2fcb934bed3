"""GPU health, per rank: the GPU this rank is bound to is fit for a long job (NVML reads).

Each check reads `facts.health.gpus` (the bound GPU's GpuHealth, preflight/steps/gather/gpu_health.py)
and names the rank, its host, the GPU's NVML index and PCI bus id. A read NVML answered
NotSupported / NoPermission is never a pass nor a failure of the check that needs it: the check
stays silent and GPU021 lists it as info. Host-wide and cross-host comparisons are in
checks/gpu_agreement.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from preflight.lib.nvml_fabric import COMPLETED
from preflight.lib.nvml_fabric import STATES as FABRIC_STATES
from preflight.model import GpuHealth, RankFacts, Severity
from preflight.registry import LOCAL, CheckContext, Problem, Tags, check, engine_check

CORRECTED_ECC_WARN = 1000  # volatile corrected errors since boot; a healthy HBM3 GPU has none or a few
TEMPERATURE_MARGIN_C = 5  # within this many degrees of the slowdown threshold
USED_MEMORY_LIMIT = 1 << 30  # more already in use before the job starts: a leftover of an earlier job

RECOVERY_ACTIONS = {1: "reset the GPU", 2: "reboot the node", 3: "drain P2P traffic", 4: "drain and reset the GPU",
                    5: "recover the IMEX domain", 6: "reset the PCIe bus", 7: "reboot the system"}
CLOCK_EVENTS_ERROR = {0x8: "hardware slowdown", 0x40: "hardware thermal slowdown", 0x80: "hardware power brake"}
CLOCK_EVENTS_WARN = {0x4: "software power cap", 0x20: "software thermal slowdown"}


NO_DRIVER = "no NVIDIA driver"  # the skip reason of every GPU check where NVML is unavailable


def needs_nvml(facts: RankFacts, ctx: CheckContext) -> str | None:
    """The GPU health checks' applicability: they read NVML, so without it they are skipped."""
    return None if facts.health.nvml == "ok" else NO_DRIVER


def bound_gpus(facts: RankFacts) -> Iterator[GpuHealth]:
    """The GPU this rank is bound to, where NVML described it."""
    yield from facts.health.gpus


def _where(facts: RankFacts, gpu: GpuHealth, **data: Any) -> dict[str, Any]:
    return {"ranks": [facts.rank], "hosts": [facts.host],
            "data": {"gpu_index": gpu.index, "pci_bus_id": gpu.pci_bus_id, **data}}


def _gpu(facts: RankFacts, gpu: GpuHealth) -> str:
    bus = f" ({gpu.pci_bus_id})" if gpu.pci_bus_id else ""
    instance = f"MIG instance {gpu.mig_instance} of " if gpu.mig_instance else ""
    return f"{instance}GPU {gpu.index}{bus} of rank {facts.rank} on {facts.host}"


def _nvml_absence_matters(facts: RankFacts, ctx: CheckContext) -> str | None:
    """GPU001/GPU002 apply where NVML is read, asked for (NCCL) or expected (NVIDIA device nodes)."""
    health = facts.health
    if health.nvml == "ok" or ctx.backend == "nccl" or health.nvidia_device_nodes:
        return None
    return NO_DRIVER


@check("GPU001", tag=Tags.GPU, scope=LOCAL, severity=Severity.INFO, applies=_nvml_absence_matters,
       hint="Expected on a machine without an NVIDIA driver; on a GPU node, install or load the driver "
       "(`nvidia-smi` must work) before running the job.")
def nvml_unavailable(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NVML is not available on this rank, so no GPU health was read.

    NVML ships with the NVIDIA driver. Without it (a CPU machine, a container started without
    the NVIDIA runtime) the GPU checks have nothing to read. Said when the job asked for NCCL
    (GPU002 then marks the GPU checks could-not-run) or when the host has NVIDIA device nodes
    (/dev/nvidiactl) that NVML could not use; a gloo or CPU run elsewhere reports every GPU check
    skipped ("no NVIDIA driver"), neither passed nor failed.
    """
    health = facts.health
    if health.nvml.startswith("unavailable") and (ctx.backend == "nccl" or health.nvidia_device_nodes):
        yield Problem(f"NVML not available on {facts.host}: {facts.health.nvml.partition(': ')[2]}",
                      ranks=[facts.rank], hosts=[facts.host])


@check("GPU002", tag=Tags.GPU, scope=LOCAL, severity=Severity.COULD_NOT_RUN, applies=_nvml_absence_matters,
       hint="Run on the GPU nodes with the NVIDIA driver loaded and the container's NVIDIA runtime; "
       "`nvidia-smi` must work where the job runs.")
def gpu_checks_could_not_run(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The job asked for NCCL (--backend nccl) but NVML is not available, so no GPU was checked.

    With gloo on a CPU machine the GPU checks are reported skipped; a NCCL job needs GPUs, and
    preflight cannot vouch for GPUs it could not read.
    """
    if ctx.backend == "nccl" and facts.health.nvml.startswith("unavailable"):
        yield Problem(f"GPU checks could not run on {facts.host} for --backend nccl: NVML not available "
                      f"({facts.health.nvml.partition(': ')[2]})", ranks=[facts.rank], hosts=[facts.host])


@check("GPU003", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.ERROR, blames_host=True,
       hint="The GPU fell off the bus: drain the node, reset the GPU (`nvidia-smi -r`) or reboot; "
       "if it recurs, reseat or RMA it.")
def gpu_lost(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NVML says the GPU this rank will use is lost (GPU_IS_LOST), or cannot read it at all.

    A lost GPU (XID 79, fallen off the bus) fails every CUDA call; the job would crash at its
    first kernel or hang its peers in the first collective.
    """
    for gpu in bound_gpus(facts):
        if gpu.lost:
            yield Problem(f"{_gpu(facts, gpu)} is lost (NVML: GPU_IS_LOST): {'; '.join(gpu.errors)[:200]}",
                          **_where(facts, gpu, errors=gpu.errors))


@check("GPU004", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.ERROR, blames_host=True,
       hint="Drain the node and reset the GPU; uncorrectable errors that come back mean failing HBM: RMA it.")
def ecc_uncorrectable(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The GPU has uncorrectable (double-bit) ECC errors since the last reboot (volatile count).

    An uncorrectable error kills the process that touched the memory (XID 48/94/95) and
    corrupts whatever it was computing; HBM faults were 17% of Llama 3's interruptions.
    """
    for gpu in bound_gpus(facts):
        if gpu.ecc_uncorrected_volatile:
            yield Problem(f"{_gpu(facts, gpu)} has {gpu.ecc_uncorrected_volatile} uncorrectable ECC error(s)",
                          **_where(facts, gpu, count=gpu.ecc_uncorrected_volatile))


@check("GPU005", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.WARN,
       hint="Enable ECC (`nvidia-smi -e 1`) and reboot or reset the GPU so the pending mode takes effect.")
def ecc_mode(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """ECC is disabled on the GPU, or an ECC mode change waits for a reset.

    Without ECC a memory fault silently corrupts training state; a pending change means the
    node was reconfigured and not reset, so it does not run as configured.
    """
    for gpu in bound_gpus(facts):
        faults = [text for bad, text in ((gpu.ecc_enabled is False, "ECC is disabled"),
                                         (gpu.ecc_pending, "an ECC mode change is pending (needs a reset)")) if bad]
        if faults:
            yield Problem(f"{_gpu(facts, gpu)}: {' and '.join(faults)}", **_where(facts, gpu))


@check("GPU006", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.WARN,
       hint="Watch the GPU: many corrected errors precede uncorrectable ones; plan to drain and RMA it.")
def ecc_corrected_high(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The GPU has a very high count of corrected ECC errors since the last reboot (over 1000)."""
    for gpu in bound_gpus(facts):
        if (gpu.ecc_corrected_volatile or 0) > CORRECTED_ECC_WARN:
            yield Problem(f"{_gpu(facts, gpu)} has {gpu.ecc_corrected_volatile} corrected ECC errors "
                          f"(over {CORRECTED_ECC_WARN})", **_where(facts, gpu, count=gpu.ecc_corrected_volatile))


@check("GPU007", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.ERROR, blames_host=True,
       hint="Drain and reset this GPU (`nvidia-smi -r` or reboot) so the remapping takes effect; "
       "a remapping failure means the GPU is out of spare rows: RMA it.")
def memory_remap(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """A row remapping is pending or has failed (Ampere and later), or retired pages are pending (older GPUs).

    The GPU found bad memory and will stop using it only after a reset; until then the bad
    rows are still in use. A failed remapping has no spare rows left.
    """
    for gpu in bound_gpus(facts):
        faults = [text for bad, text in ((gpu.remap_pending, "a row remapping is pending"),
                                         (gpu.remap_failure, "a row remapping failed"),
                                         (gpu.retired_pages_pending, "retired pages are pending")) if bad]
        if faults:
            yield Problem(f"{_gpu(facts, gpu)}: {' and '.join(faults)}", **_where(facts, gpu, faults=faults))


@check("GPU008", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.ERROR, blames_host=True,
       hint="Do what the driver asks (drain the node, then reset the GPU or reboot) before running on it.")
def recovery_action(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The driver asks for a GPU recovery action (reset, reboot, drain): NVML's GPU recovery action is not none."""
    for gpu in bound_gpus(facts):
        if gpu.recovery_action:
            action = RECOVERY_ACTIONS.get(gpu.recovery_action, f"action {gpu.recovery_action}")
            yield Problem(f"{_gpu(facts, gpu)}: the driver asks to {action}",
                          hint=f"Drain the node and {action} before running on it.",
                          **_where(facts, gpu, recovery_action=gpu.recovery_action, action=action))


def _reasons(mask: int | None, table: dict[int, str]) -> list[str]:
    return [name for bit, name in table.items() if mask and mask & bit]


@check("GPU009", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.ERROR, blames_host=True,
       hint="Check the node's cooling and power (fans, inlet temperature, PSUs, `nvidia-smi -q -d PERFORMANCE`); "
       "drain it until fixed: one slow GPU sets the pace of every collective.")
def clocks_hardware_slowdown(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The GPU's clocks are held down by hardware: slowdown, thermal slowdown or power brake.

    These come from the board (overheating, a failing power supply, an external power-brake
    signal), not from software limits, and make this GPU the straggler of every collective.
    """
    for gpu in bound_gpus(facts):
        reasons = _reasons(gpu.clock_event_reasons, CLOCK_EVENTS_ERROR)
        if reasons:
            yield Problem(f"{_gpu(facts, gpu)} clocks are held down: {', '.join(reasons)}",
                          **_where(facts, gpu, reasons=reasons, mask=gpu.clock_event_reasons))


@check("GPU010", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.WARN,
       hint="Check the power limit and cooling (`nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE`).")
def clocks_software_slowdown(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The GPU's clocks are held down by software: thermal slowdown or the power cap (idle ignored)."""
    for gpu in bound_gpus(facts):
        reasons = _reasons(gpu.clock_event_reasons, CLOCK_EVENTS_WARN)
        if reasons:
            yield Problem(f"{_gpu(facts, gpu)} clocks are held down: {', '.join(reasons)}",
                          **_where(facts, gpu, reasons=reasons, mask=gpu.clock_event_reasons))


@check("GPU011", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.ERROR, blames_host=True,
       hint="Reseat the GPU (or its riser / retimer card); if the link stays narrow, RMA the part. "
       "Drain the node meanwhile: host-device copies run at a fraction of their speed.")
def pcie_width_degraded(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The GPU's PCIe link runs narrower than its maximum width (x8 instead of x16): a degraded link."""
    for gpu in bound_gpus(facts):
        if gpu.pcie_width and gpu.pcie_max_width and gpu.pcie_width < gpu.pcie_max_width:
            yield Problem(f"{_gpu(facts, gpu)} PCIe link is x{gpu.pcie_width}, its maximum is x{gpu.pcie_max_width}",
                          **_where(facts, gpu, width=gpu.pcie_width, max_width=gpu.pcie_max_width))


@check("GPU012", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.INFO,
       hint="Usually nothing to do: an idle GPU lowers its PCIe generation to save power. "
       "If it stays low under load, reseat the GPU.")
def pcie_generation_low(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The GPU's PCIe link runs below its maximum generation (normal while the GPU idles)."""
    for gpu in bound_gpus(facts):
        if gpu.pcie_gen and gpu.pcie_max_gen and gpu.pcie_gen < gpu.pcie_max_gen:
            yield Problem(f"{_gpu(facts, gpu)} PCIe link is gen {gpu.pcie_gen}, its maximum is gen {gpu.pcie_max_gen}",
                          **_where(facts, gpu, gen=gpu.pcie_gen, max_gen=gpu.pcie_max_gen))


@check("GPU013", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.WARN,
       hint="Reset the counters and watch them (`nvidia-smi nvlink -e`); links that keep counting need "
       "the GPU or baseboard reseated, or an RMA.")
def nvlink_errors(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """NVLink replay, recovery or CRC error counters of the GPU's links are above 0."""
    for gpu in bound_gpus(facts):
        bad = {}
        for link in gpu.nvlinks:
            counts = {name: value for name, value in (("replay", link.replay), ("recovery", link.recovery),
                                                      ("crc_flit", link.crc_flit), ("crc_data", link.crc_data))
                      if value}
            if counts:
                bad[str(link.link)] = counts
        if bad:
            text = "; ".join(f"link {link}: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                             for link, counts in bad.items())
            yield Problem(f"{_gpu(facts, gpu)} NVLink errors: {text}", **_where(facts, gpu, links=bad))


@check("GPU014", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.ERROR, blames_host=True,
       hint="Start or restart nvidia-fabricmanager on the node and check its log; drain the node until "
       "every GPU's fabric state is completed.")
def fabric_not_ready(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """On an NVSwitch system, the GPU's fabric registration (fabric manager) is not completed or failed.

    Until the fabric manager has registered the GPU with the NVSwitches, NVLink peer traffic
    fails and NCCL falls back or errors out. A registration not started or in progress is read
    again for a short grace first (after a reboot every node shows it for a while); only one
    still not completed then is reported, with how long it was watched.
    """
    for gpu in bound_gpus(facts):
        fabric = gpu.fabric
        if fabric is None or not fabric.state:  # 0: not an NVSwitch system / not supported
            continue
        if fabric.state != COMPLETED or fabric.status:
            what = FABRIC_STATES.get(fabric.state, str(fabric.state))
            status = f", status {fabric.status}" if fabric.status else ""
            waited = f" (still, after reading it again for {fabric.waited_s:g} s)" if fabric.waited_s else ""
            yield Problem(f"{_gpu(facts, gpu)} fabric state is {what}{status}{waited}",
                          **_where(facts, gpu, fabric_state=fabric.state, fabric_status=fabric.status,
                                   waited_s=fabric.waited_s))


@check("GPU015", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.WARN,
       hint="Enable persistence (`nvidia-persistenced`, or `nvidia-smi -pm 1`) on the node.")
def persistence_off(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """Persistence mode is off: the driver tears the GPU down between processes (slow starts, lost state)."""
    for gpu in bound_gpus(facts):
        if gpu.persistence_mode is False:
            yield Problem(f"{_gpu(facts, gpu)} has persistence mode off", **_where(facts, gpu))


@check("GPU016", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.ERROR, blames_host=True,
       hint="Set the compute mode back to default (`nvidia-smi -c DEFAULT`), or drain the node until an admin does.")
def compute_prohibited(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The GPU's compute mode is prohibited: no process can create a CUDA context on it."""
    for gpu in bound_gpus(facts):
        if gpu.compute_mode == 2:
            yield Problem(f"{_gpu(facts, gpu)} compute mode is prohibited", **_where(facts, gpu))


@check("GPU017", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.WARN,
       hint="Disable MIG (`nvidia-smi -mig 0` and a GPU reset) unless the job is meant to run on MIG slices.")
def mig_enabled(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """MIG is enabled on the GPU: a rank gets a slice, not the GPU, and NCCL cannot use NVLink between slices.
    Not for a rank bound to a MIG instance by name (CUDA_VISIBLE_DEVICES=MIG-...): that job asked for a slice."""
    for gpu in bound_gpus(facts):
        if gpu.mig_enabled and not gpu.mig_instance:
            yield Problem(f"{_gpu(facts, gpu)} has MIG enabled", **_where(facts, gpu))


@check("GPU018", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.ERROR, blames_host=True,
       hint="Kill the leftover processes (or drain the node if they will not die: a zombie CUDA context "
       "needs a GPU reset); the job would share the GPU's memory and compute with them.")
def foreign_processes(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """Other processes run on the GPU, or over 1 GiB of its memory is in use before the job starts.

    A leftover of an earlier job (a hung rank, a zombie context) holds memory the job will
    need (out-of-memory at step 1) and competes for the SMs. Not for a MIG instance: the GPU's other
    instances are other jobs' by design, and its memory use is theirs (a whole-GPU expectation).
    """
    for gpu in bound_gpus(facts):
        if gpu.mig_instance:
            continue
        others = [p for p in gpu.processes or [] if p.pid != facts.system.pid]
        used = gpu.memory_used_bytes or 0
        if not others and used <= USED_MEMORY_LIMIT:
            continue
        named = ", ".join(f"pid {p.pid}" + (f" ({p.name})" if p.name else "") +
                          (f" {p.used_bytes / 2**30:.1f} GiB" if p.used_bytes else "") for p in others[:8])
        parts = ([f"{len(others)} other process(es): {named}"] if others else []) + \
            ([f"{used / 2**30:.1f} GiB of memory already used"] if used > USED_MEMORY_LIMIT else [])
        yield Problem(f"{_gpu(facts, gpu)}: {'; '.join(parts)}",
                      **_where(facts, gpu, pids=[p.pid for p in others], used_bytes=used))


@check("GPU019", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.WARN,
       hint="Check the node's cooling (fans, airflow, inlet temperature): under load it will slow down.")
def temperature_high(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The GPU is within 5 degrees C of its slowdown temperature before the job even starts."""
    for gpu in bound_gpus(facts):
        if gpu.temperature_c is not None and gpu.slowdown_c and \
                gpu.temperature_c >= gpu.slowdown_c - TEMPERATURE_MARGIN_C:
            yield Problem(f"{_gpu(facts, gpu)} is at {gpu.temperature_c} C; it slows down at {gpu.slowdown_c} C",
                          **_where(facts, gpu, temperature_c=gpu.temperature_c, slowdown_c=gpu.slowdown_c))


@check("GPU020", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.WARN,
       hint="Restore the default power limit (`nvidia-smi -pl`, or the node's power policy) unless capped on purpose.")
def power_limit_low(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """The GPU's enforced power limit is below its default: it will run slower than its siblings."""
    for gpu in bound_gpus(facts):
        if gpu.power_limit_mw and gpu.power_default_mw and gpu.power_limit_mw < gpu.power_default_mw:
            yield Problem(f"{_gpu(facts, gpu)} power limit is {gpu.power_limit_mw // 1000} W, its default "
                          f"{gpu.power_default_mw // 1000} W",
                          **_where(facts, gpu, limit_mw=gpu.power_limit_mw, default_mw=gpu.power_default_mw))


@check("GPU021", tag=Tags.GPU, scope=LOCAL, applies=needs_nvml, severity=Severity.INFO,
       hint="Nothing to fix on the job's side: this GPU or driver does not report these (or the container "
       "lacks the permission); the checks that need them did not run for it.")
def gpu_reads_unavailable(facts: RankFacts, ctx: CheckContext) -> Iterable[Problem]:
    """Some health reads are not available on this GPU (NVML: NotSupported / NoPermission).

    The checks that need them neither pass nor fail for this GPU; this lists what was not
    checked. Reads that failed otherwise are listed too.
    """
    for gpu in bound_gpus(facts):
        if gpu.lost:
            continue  # GPU003
        if gpu.unavailable:
            yield Problem(f"not available on this GPU ({_gpu(facts, gpu)}): {', '.join(gpu.unavailable)}",
                          **_where(facts, gpu, unavailable=gpu.unavailable))
        if gpu.errors:
            yield Problem(f"NVML reads failed on {_gpu(facts, gpu)}: {'; '.join(gpu.errors)[:300]}",
                          **_where(facts, gpu, errors=gpu.errors))


# What the common XIDs mean (NVIDIA's XID catalogue, abridged).
XID_MEANING = {
    13: "graphics engine exception (often the application; repeated: hardware)",
    31: "GPU memory page fault (often the application; repeated: hardware)",
    43: "GPU stopped processing",
    45: "preemptive cleanup after a fault",
    48: "double-bit ECC error",
    63: "ECC page retirement / row remapping recorded",
    64: "ECC page retirement / row remapping failed",
    74: "NVLink error",
    79: "GPU fell off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


@engine_check("GPU040", tag=Tags.GPU, severity=Severity.ERROR, blames_host=True,
              hint="Drain the node and look up the XID in the driver log (`dmesg | grep -i xid`): reset the GPU "
              "for ECC / GSP errors, reseat or RMA it for bus (79) and NVLink (74) errors.")
def xid_events(rank: int, host: str, gpu_index: int, xids: list[int]) -> Iterable[Problem]:
    """The driver raised critical XID events on a rank's GPU during the run.

    preflight registers for the bound GPU's critical XID events with the facts and drains them
    after the probes, so an XID its own collectives provoked (or that arrived meanwhile) is
    named with the rank, host and GPU. XID 13/31/43 can come from the application; during
    preflight's own collectives they point at the hardware.
    """
    counts: dict[int, int] = {}
    for xid in xids:
        counts[xid] = counts.get(xid, 0) + 1
    text = "; ".join(f"XID {xid} ({XID_MEANING.get(xid, 'see NVIDIA XID catalogue')})" + (f" x{n}" if n > 1 else "")
                     for xid, n in sorted(counts.items()))
    yield Problem(f"GPU {gpu_index} of rank {rank} on {host} raised {text} during the run",
                  ranks=[rank], hosts=[host], data={"gpu_index": gpu_index, "xids": sorted(counts)})
