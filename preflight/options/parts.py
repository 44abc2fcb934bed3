"""The parts of RunOptions, one concern each, each a small Struct that validates itself where it is built
(torchtitan's ParallelDims): the timeouts, the probes (the mesh with the world it is resolved for), the
device probes, the run's history. The storage family's part is lib/storage_options.StorageOptions and the
report targets reports/targets.ReportTargets. Each field is a row of the options table (its target, e.g.
`timeouts.run_s` for --timeout), and `check_rows` checks it with the row's kind, naming the option as both
front doors spell it (`timeout_s (--timeout) must be a number of seconds, not str`).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct, field

from preflight.lib.errors import BadInput, BadOptionType
from preflight.lib.mesh_shape import WORLD_DIM, MeshDim, mesh_text, resolve_dims
from preflight.lib.numbers import shown
from preflight.options import kinds
from preflight.options.table import OPTIONS, option_name
from preflight.options.values import MAX_FLAKY_WINDOW, MAX_LIST_CHARS

# Each field's default is its row's: one place says that --timeout is 60 s.
_DEFAULT = {option.target: option.default for option in OPTIONS if option.target}


def check_rows(part: Any, prefix: str) -> None:
    """Check `part`'s fields that rows set directly (target `prefix.field`) with their rows' kinds, in place."""
    for option in OPTIONS:
        where, _, name = option.target.rpartition(".")
        if where == prefix and option.env is None:
            setattr(part, name, option.kind.check(option_name(option.name), getattr(part, name)))


class Timeouts(Struct):
    """Every deadline of a run, in seconds: rank 0's wait for the ranks (--timeout), one check or fact
    gatherer (--check-timeout), one collective (--probe-timeout), the history each side of the verdict."""

    run_s: float = _DEFAULT["timeouts.run_s"]
    check_s: float = _DEFAULT["timeouts.check_s"]
    probe_s: float = _DEFAULT["timeouts.probe_s"]
    history_s: float = _DEFAULT["timeouts.history_s"]

    def __post_init__(self) -> None:
        check_rows(self, "timeouts")


class ProbeOptions(Struct):
    """What the collective probes measure: the mesh and the world it is resolved for, the ops, sizes and
    iterations, and how they are judged (--expect per dimension, --straggler-ratio, --strict-bandwidth)."""

    # Outermost first. Before for_world: as written (a wildcard size is WILDCARD, no derived dp);
    # after: resolved, its product is world_size and the remainder is a dimension (dp, or the wildcard).
    # [] without --mesh (the probes then measure the whole world).
    mesh: list[MeshDim] = field(default_factory=list)
    world_size: int | None = None  # set by for_world(); None until the world is known
    backend: str = _DEFAULT["probes.backend"]
    ops: list[str] = field(default_factory=list)  # [] : the plan's defaults
    sizes: list[int] = field(default_factory=list)  # bytes, ascending; [] : the plan's defaults per device
    warmup: int | None = _DEFAULT["probes.warmup"]  # None: the plan's default per device
    iters: int | None = _DEFAULT["probes.iters"]
    level: str = _DEFAULT["probes.level"]  # quick | standard | long (probes/levels.py): what the options leave open
    straggler_ratio: float = _DEFAULT["probes.straggler_ratio"]
    strict_bandwidth: bool = _DEFAULT["probes.strict_bandwidth"]  # below its profile: BW007 (error), not BW011
    localize: str = _DEFAULT["probes.localize"]  # auto | pairwise (never group testing) | grouptest (whenever)
    expect: dict[str, float] = field(default_factory=dict)  # expected busbw per dimension, GB/s

    def __post_init__(self) -> None:
        check_rows(self, "probes")
        if self.world_size is not None:
            self.mesh = resolve_dims(self.mesh, self.world_size)
        names = {d.name for d in self.mesh} | {WORLD_DIM} | ({"dp"} if self.world_size is None else set())
        for name in self.expect:
            if name not in names:
                raise BadInput(f"--expect {name}=...: no mesh dimension {name!r} "
                               f"(mesh: {mesh_text(self.mesh) or 'none'})")

    def for_world(self, world_size: int) -> ProbeOptions:
        """These options with the mesh resolved for world_size (BadInput when its arithmetic fails)."""
        return msgspec.structs.replace(self, world_size=world_size)


class DeviceOptions(Struct):
    """The device probes (probes/device/family.py): --expect's device figures (TFLOP/s, GB/s) by name, the
    family's time budget per device (None: its default per device kind), seconds of sustained load."""

    expect: dict[str, float] = field(default_factory=dict)
    budget_s: float | None = _DEFAULT["device.budget_s"]
    sustain_s: float = _DEFAULT["device.sustain_s"]

    def __post_init__(self) -> None:
        check_rows(self, "device")


class RunHistory(Struct):
    """The run's history (docs/history.md): its URL ("" none), the metrics textfile, and --flaky K/N
    (a host failed in K of its last N recorded runs is flaky)."""

    url: str = ""  # --history / PREFLIGHT_HISTORY: sqlite:///path or postgresql://...
    metrics: str | None = _DEFAULT["history.metrics"]  # --metrics: Prometheus textfile for node_exporter
    flaky_failures: int = 3
    flaky_window: int = 10

    def __post_init__(self) -> None:
        check_rows(self, "history")
        if not isinstance(self.url, str):
            raise BadOptionType(f"{option_name('history')} must be a URL string, not {type(self.url).__name__}")
        if self.url:
            check_history_url(self.url)
        for name in ("flaky_failures", "flaky_window"):
            if kinds.count(option_name(name), getattr(self, name)) is None:
                raise BadOptionType(f"{option_name(name)} must be a whole number, not None")
        check_flaky(self.flaky_failures, self.flaky_window)


def check_flaky(failures: int, window: int) -> None:
    """--flaky K/N as both `preflight run` and `preflight history exclude` take it: 1 <= K <= N <= the cap."""
    if not 1 <= failures <= window <= MAX_FLAKY_WINDOW:
        raise BadInput(f"--flaky {failures}/{window}: K/N with 1 <= K <= N <= {MAX_FLAKY_WINDOW}")


def check_history_url(url: str) -> str:
    """The --history URL when it is one preflight can use (sqlite:///path, postgresql://...); else BadInput."""
    from preflight.history.store import HistoryError, check_url  # SQLAlchemy only when a history is asked for

    if len(url) > MAX_LIST_CHARS:
        raise BadInput(f"--history: {shown(url)} is longer than {MAX_LIST_CHARS} characters")
    try:
        return check_url(url)
    except HistoryError as exc:
        raise BadInput(f"--history: {exc}") from None
