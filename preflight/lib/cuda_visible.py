"""Which physical GPU (or MIG instance) each CUDA ordinal of this process is, by PCI bus id.

CUDA_VISIBLE_DEVICES lists CUDA ordinals, GPU UUIDs (or unique prefixes of them) or MIG instance
UUIDs (`MIG-<uuid>`, or the pre-R470 `MIG-GPU-<gpu uuid>/<gi>/<ci>`); CUDA stops at the first
entry it cannot resolve. An ordinal counts in CUDA's own enumeration of every GPU, whose order
CUDA_DEVICE_ORDER sets: PCI_BUS_ID (NVML's order too: NVML enumerates by bus id) or, by default,
FASTEST_FIRST. CUDA's documentation gives no more than "FASTEST_FIRST causes CUDA to enumerate the
available devices in fastest to slowest order using a simple heuristic" (CUDA Programming Guide,
CUDA environment variables; older editions: "guess which device is fastest ... make that device
0, leaving the order of the rest of the devices unspecified"); the heuristic itself is not
documented. On a node of one GPU model every device is equally fast and the order is the bus
order; on a mixed node it is not, and NVML's index k is then not CUDA's ordinal k. So every entry
is resolved here to a bus id, and NVML is asked about that bus id, never about an index taken
from the variable. Where CUDA's order cannot be known from NVML alone (FASTEST_FIRST and GPUs of
more than one model, by name or by compute capability: an A100 beside an A30 share 8.0) the note
says so and names the fix (CUDA_DEVICE_ORDER=PCI_BUS_ID), and the guess is compute capability,
highest first, ties by bus id.

A MIG instance is named as what it is (its `MIG-` UUID, never given a `GPU-` prefix) and carries its
parent GPU's NVML index: health reads are the parent's, whole-GPU expectations are not applied to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from msgspec import Struct

PCI_BUS_ID = "PCI_BUS_ID"
FASTEST_FIRST = "FASTEST_FIRST"


class NvmlGpu(Struct, frozen=True):
    """One GPU as NVML sees it: its NVML index, PCI bus id, UUID, compute capability, MIG instances and model."""

    index: int
    bus_id: str
    uuid: str
    capability: tuple[int, int] | None = None
    mig_uuids: tuple[str, ...] = ()
    name: str = ""  # the model NVML names ("" unread): two models of one capability still differ in speed


class Visible(Struct, frozen=True):
    """One CUDA device of this process: the GPU's NVML index and bus id, and the MIG instance ("" a whole GPU)."""

    index: int
    bus_id: str
    mig: str = ""


def bus_key(bus_id: str) -> tuple[int, int, int, int]:
    """A PCI bus id's sort key (domain, bus, device, function), whatever the case and domain width."""
    try:
        domain, bus, rest = bus_id.strip().lower().split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return (1 << 32, 0, 0, 0)


GUESSED = ("GPUs of different models under CUDA_DEVICE_ORDER=FASTEST_FIRST: CUDA orders them fastest first by a "
           "heuristic it does not document (taken here as the highest compute capability first, ties by bus id); "
           "set CUDA_DEVICE_ORDER=PCI_BUS_ID for an order every tool agrees on")
UNKNOWN = ("GPUs of different models under CUDA_DEVICE_ORDER=FASTEST_FIRST and a compute capability NVML does "
           "not give: CUDA ordinals taken in PCI order; set CUDA_DEVICE_ORDER=PCI_BUS_ID to be sure")


def _joined(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def cuda_order(gpus: Sequence[NvmlGpu], order: str | None) -> tuple[list[NvmlGpu], str]:
    """Every GPU in CUDA's ordinal order under CUDA_DEVICE_ORDER=`order`, and a note when that is a guess."""
    # NVML enumerates by bus id too: a GPU whose bus id cannot be read (lost) keeps its NVML place.
    known = all(g.bus_id for g in gpus)
    by_bus = sorted(gpus, key=lambda g: bus_key(g.bus_id)) if known else sorted(gpus, key=lambda g: g.index)
    wanted = (order or FASTEST_FIRST).strip().upper()
    if wanted == PCI_BUS_ID:
        return by_bus, ""
    note = "" if wanted == FASTEST_FIRST else f"CUDA_DEVICE_ORDER={wanted[:30]!r} is not one CUDA knows: FASTEST_FIRST"
    if len({g.capability for g in by_bus}) <= 1 and len({g.name for g in by_bus if g.name}) <= 1:
        return by_bus, note  # one model (or nothing known to tell them apart): fastest first is bus order
    if any(g.capability is None for g in by_bus):
        return by_bus, _joined(note, UNKNOWN)
    # Two models: CUDA's heuristic is undocumented, so whichever order is taken here is a guess, said as one.
    fastest = sorted(by_bus, key=lambda g: tuple(-v for v in (g.capability or (0, 0))))
    return fastest, _joined(note, GUESSED)


def resolve(spec: str | None, gpus: Sequence[NvmlGpu], order: str | None) -> tuple[list[Visible], str]:
    """The devices CUDA_VISIBLE_DEVICES=`spec` gives this process, in ordinal order, and a note (why an entry
    named nothing, or why the order is a guess). None: every GPU."""
    enumerated, note = cuda_order(gpus, order)
    if spec is None:
        return [Visible(g.index, g.bus_id) for g in enumerated], note
    chosen: list[Visible] = []
    for entry in (part.strip() for part in spec.split(",")):
        if not entry:
            break
        found, why = _entry(entry, enumerated)
        if found is None:  # CUDA stops at the first entry it cannot resolve
            note = _joined(note, why)
            break
        chosen.append(found)
    return chosen, note


def _entry(entry: str, enumerated: list[NvmlGpu]) -> tuple[Visible | None, str]:
    if entry.isascii() and entry.isdigit():
        ordinal = int(entry)
        if ordinal >= len(enumerated):
            return None, ""
        gpu = enumerated[ordinal]
        return Visible(gpu.index, gpu.bus_id), ""
    if entry.startswith("MIG-"):
        return _mig(entry, enumerated)
    prefix = entry if entry.startswith("GPU-") else f"GPU-{entry}"
    return _unique(entry, [g for g in enumerated if g.uuid.startswith(prefix)], lambda g: Visible(g.index, g.bus_id))


def _mig(entry: str, enumerated: list[NvmlGpu]) -> tuple[Visible | None, str]:
    """`MIG-<instance uuid>` (R470 and later), or `MIG-GPU-<gpu uuid>/<gi>/<ci>` (before)."""
    if entry.startswith("MIG-GPU-"):
        parent_uuid = entry[len("MIG-"):].split("/", 1)[0]
        return _unique(entry, [g for g in enumerated if g.uuid == parent_uuid],
                       lambda g: Visible(g.index, g.bus_id, mig=entry))
    return _unique(entry, [g for g in enumerated if any(m.startswith(entry) for m in g.mig_uuids)],
                   lambda g: Visible(g.index, g.bus_id, mig=next(m for m in g.mig_uuids if m.startswith(entry))))


def _unique(entry: str, matches: list[NvmlGpu], make: Callable[[NvmlGpu], Visible]) -> tuple[Visible | None, str]:
    if len(matches) != 1:
        return None, f"CUDA_VISIBLE_DEVICES entry {entry[:48]!r} names no single GPU NVML sees"
    return make(matches[0]), ""
