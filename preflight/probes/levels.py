"""`--level quick|standard|long`: how much a run measures, with a stated time budget each, as DCGM's
`dcgmi diag -r 1|2|3` are chosen.

A level fills what the options leave to the plan: the collectives and message sizes, the warm-up
and timed iterations, the device probes' time per device, the sustained load, and whether the
storage family must run. An option given explicitly always wins over its level. The budgets are
the wall time a level is built to fit on a healthy node of 8 GPUs, the checks and the probes
together (measured on CPU here; docs/probes.md#levels says what was measured where):

- quick (60 s, a Slurm prolog's usual limit): every check, one all_reduce per dimension at 1 MiB
  and 64 MiB, 10 timed iterations, the device probes at 1 s per device.
- standard (3 min, the default): the checks, all_reduce and all_to_all at 1, 64 and 256 MiB,
  20 iterations, the device probes at 4 s per device.
- long (15 min): every collective from 1 MiB to 1 GiB (x4), 50 iterations, the device probes at
  10 s per device, 120 s of sustained load on each GPU (--device-sustain), and the storage family
  (--storage PATH is required).
"""

from __future__ import annotations

from msgspec import Struct, field

MIB = 1 << 20


class Level(Struct, frozen=True):
    """One level's plan defaults, per device kind ("cpu", "cuda"), and its stated budget."""

    name: str
    budget_s: int  # the wall time it is built to fit on a healthy 8-GPU node
    what: str  # what it runs, in words (help, docs, `preflight explain level`)
    ops: tuple[str, ...]
    sizes: dict[str, tuple[int, ...]]
    warmup: dict[str, int]
    iters: dict[str, int]
    device_budget_s: dict[str, float]
    device_sustain_s: float = 0.0
    storage: bool = False  # the storage family runs (and needs --storage PATH)
    sustain_on: tuple[str, ...] = field(default=("cuda",))


QUICK = Level(
    "quick", 60, "one all_reduce per dimension at 1 and 64 MiB, 10 iterations, device probes 1 s per device",
    ops=("all_reduce",), sizes={"cpu": (MIB,), "cuda": (MIB, 64 * MIB)},
    warmup={"cpu": 1, "cuda": 2}, iters={"cpu": 5, "cuda": 10}, device_budget_s={"cpu": 0.03, "cuda": 1.0})
STANDARD = Level(
    "standard", 180, "all_reduce and all_to_all at 1, 64 and 256 MiB, 20 iterations, device probes 4 s per device",
    ops=("all_reduce", "all_to_all"), sizes={"cpu": (MIB, 4 * MIB), "cuda": (MIB, 64 * MIB, 256 * MIB)},
    warmup={"cpu": 2, "cuda": 5}, iters={"cpu": 5, "cuda": 20}, device_budget_s={"cpu": 0.03, "cuda": 4.0})
LONG = Level(
    "long", 900, "every collective from 1 MiB to 1 GiB (x4), 50 iterations, device probes 10 s per device, "
    "120 s of sustained load per GPU, and the storage family (its path required)",
    ops=("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"),
    sizes={"cpu": (MIB, 4 * MIB, 16 * MIB), "cuda": tuple(MIB * 4**k for k in range(6))},
    warmup={"cpu": 2, "cuda": 5}, iters={"cpu": 10, "cuda": 50}, device_budget_s={"cpu": 0.1, "cuda": 10.0},
    device_sustain_s=120.0, storage=True)

LEVELS = {level.name: level for level in (QUICK, STANDARD, LONG)}
DEFAULT_LEVEL = STANDARD.name


def level_help() -> str:
    """The levels as `--level`'s help lists them: name, budget, what it runs."""
    return "; ".join(f"{level.name} ({_minutes(level.budget_s)} on a healthy 8-GPU node): {level.what}"
                     for level in LEVELS.values())


def _minutes(seconds: int) -> str:
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min"
