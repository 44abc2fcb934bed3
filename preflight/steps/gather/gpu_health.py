"""The health of the GPU this rank will use, read through NVML (nvml_source.py, the one boundary).

Fills `facts.health`: whether NVML is there at all (`nvml`), which GPU this rank is bound to
(`bound_index`, by the rule the probes bind with: one visible GPU is the rank's; at least as
many visible as local ranks, LOCAL_RANK's; CUDA_VISIBLE_DEVICES as CUDA ordinals (in
CUDA_DEVICE_ORDER's order), GPU UUIDs or MIG instance UUIDs, each mapped to NVML by PCI bus id:
lib/cuda_visible.py), and that GPU's health reads (`gpus`, one GpuHealth). A read NVML answers
NotSupported / NoPermission is listed in `GpuHealth.unavailable`; a GPU_IS_LOST marks the
device lost. Host-wide facts every rank of a host shares (NVLink counts of every GPU, names,
bus ids) are in `facts.gpus` (gpus.py).

The fabric info (nvml_fabric.py) is read again while it is transient (registration not started or
in progress, a route recovery under way), for up to `GatherOptions.settle_grace_s` (lib/settle.py).
The IMEX channels this rank can open are listed from `/dev/nvidia-caps-imex-channels/`; tests point
PREFLIGHT_DEV_ROOT (read here only) at a FAKE /dev, since no NVIDIA driver exists on CI.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from preflight.lib import cuda_visible, nvml_fabric, nvml_source
from preflight.lib.nvml_source import INVALID_ARGUMENT, NOT_SUPPORTED, Nvml, NvmlError
from preflight.lib.settle import grace_within, settle
from preflight.model import GpuFabric, GpuHealth, GpuProcess, NvLinkHealth, RankFacts

if TYPE_CHECKING:
    from preflight.steps.gather import GatherOptions

NVLINK_MAX_LINKS = 18
T = TypeVar("T")
DEV_ROOT_VARIABLE = "PREFLIGHT_DEV_ROOT"  # tests only: a FAKE /dev holding the driver's device nodes
IMEX_CHANNELS = "nvidia-caps-imex-channels"
MAX_IMEX_CHANNELS = 16


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_gpus(nvml: Nvml) -> list[cuda_visible.NvmlGpu]:
    """Every GPU NVML sees, with what CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER are resolved against."""
    found = []
    for index in range(nvml.count()):
        try:
            handle = nvml.handle(index)
            bus, uuid = _text(nvml.read(handle, "pci_bus_id")), _text(nvml.read(handle, "uuid"))
        except NvmlError:  # a lost GPU is still a CUDA ordinal: it keeps its place, and its rank is told
            found.append(cuda_visible.NvmlGpu(index, "", ""))
            continue
        try:
            major, minor = nvml.read(handle, "cuda_capability")
            capability: tuple[int, int] | None = (int(major), int(minor))
        except (NvmlError, TypeError, ValueError):
            capability = None
        try:
            migs = tuple(_text(m) for m in nvml.read(handle, "mig_uuids"))
        except (NvmlError, TypeError):
            migs = ()
        try:
            name = _text(nvml.read(handle, "name"))
        except NvmlError:
            name = ""
        found.append(cuda_visible.NvmlGpu(index, bus, uuid, capability, migs, name))
    return found


def visible_devices(nvml: Nvml, spec: str | None, order: str | None = None) -> tuple[list[cuda_visible.Visible], str]:
    """The devices CUDA_VISIBLE_DEVICES lets this process use, in CUDA's ordinal order (CUDA_DEVICE_ORDER
    applied, each mapped to NVML by PCI bus id: lib/cuda_visible.py), and a note."""
    return cuda_visible.resolve(spec, nvml_gpus(nvml), order)


def visible_indices(nvml: Nvml, spec: str | None, order: str | None = None) -> tuple[list[int], str]:
    """The NVML indices of visible_devices (a MIG instance's: its GPU's)."""
    visible, note = visible_devices(nvml, spec, order)
    return [v.index for v in visible], note


def bind(visible: Sequence[T], local_rank: int, local_world_size: int) -> tuple[T | None, str]:
    """The visible device this rank will use (session.bind_device's rule) and why; None when none fits."""
    if not visible:
        return None, "no GPU visible"
    if len(visible) == 1:
        return visible[0], "the one visible GPU"
    if len(visible) >= local_world_size and local_rank < len(visible):
        return visible[local_rank], f"LOCAL_RANK={local_rank} of {len(visible)} visible GPUs"
    return None, (f"{len(visible)} GPUs visible for {local_world_size} local ranks: neither one per task "
                  "nor one per local rank")


class _Reader:
    """Reads of one device, each classified: value, unavailable on this GPU, lost, or failed."""

    def __init__(self, nvml: Nvml, handle: Any, health: GpuHealth) -> None:
        self.nvml, self.handle, self.health = nvml, handle, health

    def __call__(self, what: str, *args: Any, ends: Callable[[NvmlError], bool] = lambda exc: False) -> Any:
        """The read's value; None when it failed, classified, unless `ends` says the failure is the end of a
        series (a link past the GPU's last): then nothing is recorded."""
        if self.health.lost:
            return None
        try:
            return self.nvml.read(self.handle, what, *args)
        except NvmlError as exc:
            if ends(exc):
                return None
            label = what + (f"[{args[0]}]" if args else "")
            if exc.lost:
                self.health.lost = True
                self.health.errors.append(f"{label}: {exc}")
            elif exc.unavailable:
                if what not in self.health.unavailable:
                    self.health.unavailable.append(what)
            else:
                self.health.errors.append(f"{label}: {exc}")
            return None


def _past_last_link(exc: NvmlError) -> bool:
    """Whether NVML's refusal of a link means this GPU's links end before it: NVML_NVLINK_MAX_LINKS bounds every
    architecture, a GPU has fewer (an A100 12, indices 0-11; an H100 18), and past its own the driver answers
    INVALID_ARGUMENT (NOT_SUPPORTED from some); a GPU without NVLink answers NOT_SUPPORTED at link 0. None of
    these is a read missing or failed."""
    return exc.code in (INVALID_ARGUMENT, NOT_SUPPORTED)


def _nvlinks(read: _Reader) -> list[NvLinkHealth]:
    links = []
    for link in range(NVLINK_MAX_LINKS):
        state = read("nvlink_state", link, ends=_past_last_link)
        if state is None:
            break
        counters = read("nvlink_errors", link) if state else None
        replay, recovery, crc_flit, crc_data = counters if counters else (None, None, None, None)
        links.append(NvLinkHealth(link, bool(state), replay, recovery, crc_flit, crc_data))
    return links


def _fabric(read: _Reader, grace_s: float) -> GpuFabric | None:
    """The fabric info, read again while transient (for up to grace_s); None where NVML gave none."""
    first = read("fabric_info")
    if first is None:
        return None
    last, waited = settle(lambda: read("fabric_info"), nvml_fabric.transient, first, grace_s)
    fabric = last if last is not None else first  # a re-read that failed is in `errors`; the first read stands
    fabric.waited_s = waited
    return fabric


def imex_channels(dev_root: str) -> list[str] | None:
    """The IMEX channel device nodes under <dev_root>/nvidia-caps-imex-channels ([] when there are none;
    None when the folder cannot be read)."""
    try:
        names = sorted(entry.name for entry in Path(dev_root, IMEX_CHANNELS).iterdir()
                       if entry.name.startswith("channel"))
    except FileNotFoundError:
        return []
    except OSError:
        return None
    return names[:MAX_IMEX_CHANNELS]


def read_health(nvml: Nvml, index: int, settle_grace_s: float = 0.0) -> GpuHealth:
    """Every health read of NVML device `index`, each on its own: one failure never hides the rest."""
    health = GpuHealth(index=index)
    try:
        handle = nvml.handle(index)
    except NvmlError as exc:
        health.lost = exc.lost
        health.errors.append(f"handle: {exc}")
        return health
    read = _Reader(nvml, handle, health)
    health.pci_bus_id = _text(read("pci_bus_id") or "")
    health.ecc_uncorrected_volatile = read("ecc_errors", "uncorrected")
    health.ecc_corrected_volatile = read("ecc_errors", "corrected")
    mode = read("ecc_mode")
    if mode:
        health.ecc_enabled, health.ecc_pending = bool(mode[0]), bool(mode[1]) != bool(mode[0])
    rows = read("remapped_rows")
    if rows:
        health.remap_pending, health.remap_failure = bool(rows[2]), bool(rows[3])
    pending = read("retired_pages_pending")
    health.retired_pages_pending = None if pending is None else bool(pending)
    if rows and "retired_pages_pending" in health.unavailable:
        # Ampere and later replaced page retirement by row remapping (NotSupported on a real H100): not a gap
        health.unavailable.remove("retired_pages_pending")
    health.recovery_action = read("recovery_action")
    health.clock_event_reasons = read("clock_event_reasons")
    health.pcie_width, health.pcie_max_width = read("pcie_width"), read("pcie_max_width")
    health.pcie_gen, health.pcie_max_gen = read("pcie_gen"), read("pcie_max_gen")
    links = _nvlinks(read)
    health.nvlinks_read = len(links)
    health.nvlinks = [link for link in links if not link.active or link.replay or link.recovery or link.crc_flit
                      or link.crc_data]
    health.fabric = _fabric(read, settle_grace_s)
    persistence = read("persistence_mode")
    health.persistence_mode = None if persistence is None else bool(persistence)
    health.compute_mode = read("compute_mode")
    mig = read("mig_mode")
    health.mig_enabled = None if mig is None else bool(mig)
    procs = read("processes")
    if procs is not None:
        health.processes = [GpuProcess(int(pid), _text(name)[:200], used) for pid, name, used in procs[:64]]
    health.memory_used_bytes = read("memory_used")
    health.temperature_c, health.slowdown_c = read("temperature"), read("slowdown_threshold")
    health.power_limit_mw, health.power_default_mw = read("power_limit"), read("power_default")
    health.vbios = _text(read("vbios") or "")
    return health


def gather(facts: RankFacts, options: GatherOptions) -> None:
    """Fill facts.health's NVML part: availability, the bound GPU, and its health reads."""
    health = facts.health
    nvml, why = nvml_source.open_nvml(deadline_s=options.timeout_s * 0.9)
    if nvml is None:
        health.nvml = f"unavailable: {why}"
        health.nvidia_device_nodes = os.path.exists("/dev/nvidiactl")  # a driver that NVML cannot reach
        return
    try:
        health.nvml = "ok"
        visible, note = visible_devices(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"),
                                        os.environ.get("CUDA_DEVICE_ORDER"))
        health.visible_gpus = len(visible)
        device, reason = bind(visible, facts.world.local_rank, facts.world.local_world_size)
        health.bound_index = device.index if device is not None else None
        health.bound_reason = "; ".join(filter(None, (reason, note)))
        health.imex_channels = imex_channels(os.environ.get(DEV_ROOT_VARIABLE) or "/dev")
        if device is not None:
            grace = grace_within(options.settle_grace_s, options.timeout_s)
            health.gpus = [read_health(nvml, device.index, grace)]
            health.gpus[0].mig_instance = device.mig
            _watch(facts, health.gpus[0])
    finally:
        nvml.shutdown()


# This process's XID watch, by rank: opened with the facts, drained after the probes by
# steps/recheck.py (`take_xid_watch`). A dict, not one global, so in-process test ranks never share one.
_WATCHES: dict[int, nvml_source.XidWatch] = {}


def _watch(facts: RankFacts, gpu: GpuHealth) -> None:
    """Register for the bound GPU's critical XID events, for the run's duration.

    A watch belongs to one run: an earlier run's of this rank in this process that was never taken
    (it ended before its recheck; preflight.check called again in a trainer) is closed first, so a
    run whose own registration fails or whose GPU is lost never drains another run's events."""
    old = _WATCHES.pop(facts.rank, None)
    if old is not None:
        old.close()
    if gpu.lost:
        return
    watch, error = nvml_source.watch_xids(gpu.index)
    if watch is not None:
        _WATCHES[facts.rank] = watch
        facts.health.xid_watch = "watching"
    elif error is not None and error.unavailable:
        gpu.unavailable.append("xid_events")
    elif error is not None:
        gpu.errors.append(f"xid_events: {error}")


def take_xid_watch(rank: int) -> nvml_source.XidWatch | None:
    """The XID watch this rank's facts opened (the caller drains and closes it), or None."""
    return _WATCHES.pop(rank, None)
