"""RunOptions: everything a run was asked to do, as typed values, built once and validated where built.

Both front doors build it the same way, `RunOptions.build(**options by name)`: the CLI from
argparse's namespace, `preflight.check` from its keywords; the names, defaults and environment
variables are the options table's (options/table.py), and neither door imports the other.
`RunOptions.parse` turns the options written as text (--mesh, --sizes, --ops, --expect, --flaky,
the storage flags) into typed values; `__post_init__` checks every field with its row's kind,
in the manner of torchtitan's ParallelDims (its type: BadOptionType, also a TypeError; its
bounds: BadInput), and what ties fields together (K <= N of --flaky, --expect's dimensions
against the mesh, tags and check ids against the registry). The CLI turns either into one line
and exit 2; the API into a TypeError / ValueError naming the keyword. The mesh arithmetic needs
the world size, known only after step 1 (or from `launch -n`): `options.for_world(world_size)`
resolves the mesh, derived `dp` included. Nothing after this module parses an option's text or
checks its bounds again.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from preflight.lib.errors import BadInput, BadOptionType
from preflight.lib.mesh_shape import WORLD_DIM, MeshDim, mesh_text, parse_mesh_syntax, resolve_dims
from preflight.lib.numbers import shown
from preflight.lib.storage_options import StorageOptions, storage_path
from preflight.options import kinds
from preflight.options.table import BY_NAME, OPTIONS, option_name
from preflight.options.values import (
    CLOCK_SKEW_S,
    MAX_FLAKY_WINDOW,
    MAX_LIST_CHARS,
    MAX_SECONDS,
    parse_expect,
    parse_flaky,
    parse_ops,
    parse_sizes,
    split_clock_expect,
    split_device_expect,
    split_storage_expect,
    storage_options,
)
from preflight.probes.levels import LEVELS
from preflight.registry import Tags, get_check
from preflight.reports.targets import ReportTargets

# The rows whose value RunOptions holds as given, checked by their kind in __post_init__.
_PLAIN = tuple(o for o in OPTIONS if o.target and "." not in o.target and o.env is None)
_REPORTS = tuple(o for o in OPTIONS if o.target.startswith("reports."))


# Each field's default is its row's: one place says that --timeout is 60 s.
_DEFAULT = {option.name: option.default for option in OPTIONS}


@dataclass
class RunOptions:
    """Everything `preflight run` was asked to do, as typed values (the table's rows, parsed).

    Per-value checks are the rows' kinds; __post_init__ also checks what ties fields together:
    the mesh against the world size once that is known, and every --expect dimension against it.
    """

    timeout_s: float = _DEFAULT["timeout_s"]  # rank 0 waits at most this long for every rank to report
    check_timeout_s: float = _DEFAULT["check_timeout_s"]  # one check or fact gatherer may take this long
    out_dir: str | None = None
    run_id: str | None = None
    silence: list[str] = field(default_factory=list)  # check ids, upper case
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    strict: bool = _DEFAULT["strict"]
    reports: ReportTargets = field(default_factory=ReportTargets)
    # probes
    # Outermost first. Before for_world: as written (a wildcard size is WILDCARD, no derived dp);
    # after: resolved, its product is world_size and the remainder is a dimension (dp, or the wildcard).
    # [] without --mesh (the probes then measure the whole world).
    mesh: list[MeshDim] = field(default_factory=list)
    world_size: int | None = None  # set by for_world(); None until the world is known
    backend: str = _DEFAULT["backend"]
    ops: list[str] = field(default_factory=list)  # [] : the plan's defaults
    sizes: list[int] = field(default_factory=list)  # bytes, ascending; [] : the plan's defaults per device
    warmup: int | None = _DEFAULT["warmup"]  # None: the plan's default per device
    iters: int | None = _DEFAULT["iters"]
    level: str = _DEFAULT["level"]  # quick | standard | long (probes/levels.py): what the options leave open
    probe_timeout_s: float = _DEFAULT["probe_timeout_s"]
    straggler_ratio: float = _DEFAULT["straggler_ratio"]
    strict_bandwidth: bool = _DEFAULT["strict_bandwidth"]  # below its profile: BW007 (error), not BW011
    localize: str = _DEFAULT["localize"]  # auto | pairwise (never group testing) | grouptest (whenever it can)
    expect: dict[str, float] = field(default_factory=dict)  # expected busbw per dimension, GB/s
    # device probes (probes/device/family.py): --expect's device figures (TFLOP/s, GB/s) by name,
    # the family's time budget per device (None: its default per device kind), sustained load
    device_expect: dict[str, float] = field(default_factory=dict)
    device_budget_s: float | None = _DEFAULT["device_budget_s"]
    device_sustain_s: float = _DEFAULT["device_sustain_s"]
    # history (docs/history.md)
    history: str = ""  # --history / PREFLIGHT_HISTORY: sqlite:///path or postgresql://...; "" none
    history_timeout_s: float = _DEFAULT["history_timeout_s"]  # every wait on the history, each side of the verdict
    metrics: str | None = None  # --metrics: Prometheus textfile for node_exporter
    flaky_failures: int = 3  # --flaky K/N: failed in K ...
    flaky_window: int = 10  # ... of its last N recorded runs
    # the storage family (steps/storage.py): None without --storage / PREFLIGHT_STORAGE
    storage: StorageOptions | None = None
    # facts
    sysfs_root: str = _DEFAULT["sysfs_root"]
    fingerprint: list[str] = field(default_factory=list)  # --fingerprint: distributions beyond torch/nvidia-*
    clock_skew_s: float = CLOCK_SKEW_S  # --expect clock_skew=: a host's clock this far off rank 0's is CLK001
    verdict_file: str | None = None  # `preflight launch` reads rank 0's code here
    command_line: str = ""

    def __post_init__(self) -> None:
        for option in _PLAIN:
            setattr(self, option.target, option.kind.check(option_name(option.target), getattr(self, option.target)))
        self.clock_skew_s = kinds.bounded_number("clock_skew_s", self.clock_skew_s, MAX_SECONDS,
                                                 "a number of seconds")
        self.silence = [check_id.upper() for check_id in self.silence]
        self.reports = _report_targets(self.reports)
        validate_selection(self)
        if not isinstance(self.history, str):
            raise BadOptionType(f"{option_name('history')} must be a URL string, not {type(self.history).__name__}")
        if self.history:
            check_history_url(self.history)
        for name in ("flaky_failures", "flaky_window"):
            if kinds.count(option_name(name), getattr(self, name)) is None:
                raise BadOptionType(f"{option_name(name)} must be a whole number, not None")
        check_flaky(self.flaky_failures, self.flaky_window)
        if self.storage is not None and not isinstance(self.storage, StorageOptions):
            raise BadOptionType(f"storage must be a StorageOptions, not {type(self.storage).__name__}")
        self._fill_from_level()
        if self.world_size is not None:
            self.mesh = resolve_dims(self.mesh, self.world_size)
        names = {d.name for d in self.mesh} | {WORLD_DIM} | ({"dp"} if self.world_size is None else set())
        for name in self.expect:
            if name not in names:
                raise BadInput(f"--expect {name}=...: no mesh dimension {name!r} "
                               f"(mesh: {mesh_text(self.mesh) or 'none'})")

    def _fill_from_level(self) -> None:
        """--level long: its sustained load unless --device-sustain was given, and the storage family, whose
        path only the user can name (probes/levels.py)."""
        level = LEVELS[self.level]
        if level.device_sustain_s and not self.device_sustain_s:
            self.device_sustain_s = level.device_sustain_s
        if level.storage and self.storage is None:
            raise BadInput(f"--level {level.name} runs the storage family: give it the checkpoint directory, "
                           f"--storage PATH (or PREFLIGHT_STORAGE), or choose --level standard")

    @classmethod
    def build(cls, *, command_line: str = "", **given: Any) -> RunOptions:
        """RunOptions from options by the table's names (argparse's dests, preflight.check's keywords), as
        either door has them; an option not given takes the table's default, or its environment variable."""
        unknown = sorted(set(given) - set(BY_NAME))
        if unknown:
            raise BadOptionType(f"no option {', '.join(map(repr, unknown))} (`preflight run --help` lists them)")
        values = {o.name: given.get(o.name, o.default) for o in OPTIONS}
        values["history"] = history_url(values["history"])
        values["storage"] = storage_path(values["storage"])
        text = {o.name: values.pop(o.name) for o in OPTIONS if not o.target}
        reports = ReportTargets(**{o.target.partition(".")[2]: values.pop(o.name) for o in _REPORTS})
        return cls.parse(**text, reports=reports, command_line=command_line, **values)

    @classmethod
    def parse(cls, *, mesh: str = "", sizes: str = "", ops: str = "", expect: str = "", flaky: str = "",
              storage: Any = None, checkpoint_size: str = "", storage_budget: str = "", **typed: Any) -> RunOptions:
        """RunOptions from --mesh, --sizes, --ops, --expect, --flaky and the storage flags as written
        (storage: a path or None), plus the fields already typed."""
        for name, text in (("mesh", mesh), ("sizes", sizes), ("ops", ops), ("expect", expect), ("flaky", flaky),
                           ("checkpoint_size", checkpoint_size), ("storage_budget", storage_budget)):
            if not isinstance(text, str):
                raise BadOptionType(f"{name} must be a string as on the command line (e.g. sizes=\"1M,64M\"), "
                                    f"not {type(text).__name__}")
        if flaky:
            typed["flaky_failures"], typed["flaky_window"] = parse_flaky(flaky)
        expect, storage_expect = split_storage_expect(expect)
        mesh_expect, device_expect = split_device_expect(expect)
        if storage is not None:
            typed["storage"] = storage_options(storage, checkpoint_size, storage_budget, storage_expect)
        elif checkpoint_size or storage_budget or storage_expect:
            raise BadInput("--checkpoint-size, --storage-budget and --expect storage_*: only with --storage PATH "
                           "(or PREFLIGHT_STORAGE)")
        mesh_expect, skew = split_clock_expect(mesh_expect)
        if skew is not None:
            typed["clock_skew_s"] = skew
        return cls(mesh=parse_mesh_syntax(mesh), sizes=parse_sizes(sizes), ops=parse_ops(ops),
                   expect=parse_expect(mesh_expect), device_expect=device_expect, **typed)

    def output_files(self) -> dict[str, str | None]:
        """The files besides the reports that rank 0 writes, by flag: --metrics, and a sqlite
        --history's database (None for PostgreSQL), checked before the run (reports/targets.py)."""
        files: dict[str, str | None] = {"--metrics": self.metrics}
        if self.history:
            from preflight.history.store import sqlite_file  # SQLAlchemy only when a history is asked for

            files["--history"] = sqlite_file(self.history)
        return files

    def for_world(self, world_size: int) -> RunOptions:
        """These options with the mesh resolved for world_size (BadInput when its arithmetic fails)."""
        return dataclasses.replace(self, world_size=world_size)

    def probes_enabled(self) -> bool:
        """Probes run unless `--skip probe`, or `--only` names tags without `probe`."""
        if Tags.PROBE in self.skip:
            return False
        return not self.only or Tags.PROBE in self.only

    def device_probes_enabled(self) -> bool:
        """Device probes run unless `--skip gpu-probe` or `--skip probe` (they are part of step 8),
        or `--only` names neither `gpu-probe` nor `probe`."""
        if Tags.GPU_PROBE in self.skip or Tags.PROBE in self.skip:
            return False
        return not self.only or Tags.GPU_PROBE in self.only or Tags.PROBE in self.only

    def any_probes(self) -> bool:
        """The probe step runs at all: for the collectives, the device probes, or both."""
        return self.probes_enabled() or self.device_probes_enabled()


def bounded_seconds(name: str, value: Any) -> float:
    """A timeout in seconds: above 0, at most MAX_SECONDS (RunOptions' and `preflight history`'s alike)."""
    return kinds.bounded_number(option_name(name), value, MAX_SECONDS, "a number of seconds")


def check_flaky(failures: int, window: int) -> None:
    """--flaky K/N as both `preflight run` and `preflight history exclude` take it: 1 <= K <= N <= the cap."""
    if not 1 <= failures <= window <= MAX_FLAKY_WINDOW:
        raise BadInput(f"--flaky {failures}/{window}: K/N with 1 <= K <= N <= {MAX_FLAKY_WINDOW}")


def _report_targets(targets: Any) -> ReportTargets:
    """The report targets with every path a str (PathLike accepted) and quiet a bool."""
    if not isinstance(targets, ReportTargets):
        raise BadOptionType(f"reports must be a ReportTargets, not {type(targets).__name__}")
    checked = {name: o.kind.check(option_name(name), getattr(targets, name))
               for o in _REPORTS if (name := o.target.partition(".")[2])}
    checked["retry_exclude"] = kinds.path("retry_exclude", targets.retry_exclude)
    return dataclasses.replace(targets, **checked)


def validate_selection(options: RunOptions) -> None:
    """Reject unknown tags and check ids before any rank starts (the registry knows them)."""
    for tag in (*options.only, *options.skip):
        if tag not in Tags.all():
            raise BadInput(f"unknown tag {shown(tag)}; known tags: {', '.join(Tags.all())}")
    for check_id in options.silence:
        if get_check(check_id) is None:
            raise BadInput(f"--silence {shown(check_id)}: no such check id (see `preflight list`)")


def history_url(given: Any) -> Any:
    """--history / `history=` when given, else $PREFLIGHT_HISTORY, else "" (no history): the one
    place every front door (run, `preflight history`, preflight.check) resolves it."""
    return given if given is not None else os.environ.get(BY_NAME["history"].env or "", "")


def check_history_url(url: str) -> str:
    """The --history URL when it is one preflight can use (sqlite:///path, postgresql://...); else BadInput."""
    from preflight.history.store import HistoryError, check_url  # SQLAlchemy only when a history is asked for

    if len(url) > MAX_LIST_CHARS:
        raise BadInput(f"--history: {shown(url)} is longer than {MAX_LIST_CHARS} characters")
    try:
        return check_url(url)
    except HistoryError as exc:
        raise BadInput(f"--history: {exc}") from None
