"""RunOptions: everything a run was asked to do, as typed values, built once and validated where built.

Both front doors build it the same way, `RunOptions.build(**options by name)`: the CLI from
argparse's namespace, `preflight.check` from its keywords; the names, defaults and environment
variables are the options table's (options/table.py), and neither door imports the other.
`build` also parses the options written as text (--mesh, --sizes, --ops, --expect, --flaky, the
storage flags). RunOptions is the run's own options and a few parts, one concern each
(options/parts.py: timeouts, probes, device, history; StorageOptions, ReportTargets), each
validated where it is built in the manner of torchtitan's ParallelDims: every field with its
row's kind (its type: BadOptionType, also a TypeError; its bounds: BadInput), and what ties
fields together (K <= N of --flaky, --expect's dimensions against the mesh, tags and check ids
against the registry). The CLI turns either into one line
and exit 2; the API into a TypeError / ValueError naming the keyword. The mesh arithmetic needs
the world size, known only after step 1 (or from `launch -n`): `options.for_world(world_size)`
resolves the mesh, derived `dp` included. Nothing after this module parses an option's text or
checks its bounds again.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec
from msgspec import Struct, field

from preflight.lib.errors import BadInput, BadOptionType
from preflight.lib.mesh_shape import parse_mesh_syntax
from preflight.lib.numbers import shown
from preflight.lib.storage_options import StorageOptions, storage_path
from preflight.options import kinds
from preflight.options.parts import DeviceOptions, ProbeOptions, RunHistory, Timeouts
from preflight.options.table import BY_NAME, OPTIONS, option_name
from preflight.options.values import (
    CLOCK_SKEW_S,
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

_DEFAULT = {option.name: option.default for option in OPTIONS}  # one place says that --strict is off
# The rows RunOptions itself holds (the run's own, not a part's), checked by their kinds in __post_init__.
_OWN = tuple(o for o in OPTIONS if o.target and "." not in o.target and o.env is None)
_REPORTS = tuple(o for o in OPTIONS if o.target.startswith("reports."))
_PARTS = {"timeouts": Timeouts, "probes": ProbeOptions, "device": DeviceOptions, "history": RunHistory,
          "reports": ReportTargets}
# Where an option that was once a field of RunOptions itself lives now: options.timeout_s -> options.timeouts.run_s.
_MOVED = {**{o.name: o.target for o in OPTIONS if "." in o.target and not o.target.startswith("reports.")},
          "mesh": "probes.mesh", "ops": "probes.ops", "sizes": "probes.sizes", "expect": "probes.expect",
          "world_size": "probes.world_size", "device_expect": "device.expect",
          "flaky_failures": "history.flaky_failures", "flaky_window": "history.flaky_window"}


class RunOptions(Struct):
    """Everything `preflight run` was asked to do, as typed values: the run's own options and its parts
    (options/parts.py), each validated where it is built. Build it with `RunOptions.build`."""

    timeouts: Timeouts = field(default_factory=Timeouts)
    probes: ProbeOptions = field(default_factory=ProbeOptions)
    device: DeviceOptions = field(default_factory=DeviceOptions)
    history: RunHistory = field(default_factory=RunHistory)
    storage: StorageOptions | None = None  # the storage family (steps/storage.py): None without --storage
    reports: ReportTargets = field(default_factory=ReportTargets)
    # the run's own
    out_dir: str | None = None
    run_id: str | None = None
    silence: list[str] = field(default_factory=list)  # check ids, upper case
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    strict: bool = _DEFAULT["strict"]
    sysfs_root: str = _DEFAULT["sysfs_root"]
    fingerprint: list[str] = field(default_factory=list)  # --fingerprint: distributions beyond torch/nvidia-*
    clock_skew_s: float = CLOCK_SKEW_S  # --expect clock_skew=: a host's clock this far off rank 0's is CLK001
    verdict_file: str | None = None  # `preflight launch` reads rank 0's code here
    command_line: str = ""

    def __post_init__(self) -> None:
        for name, part in _PARTS.items():
            if not isinstance(getattr(self, name), part):
                raise BadOptionType(f"{name} must be a {part.__name__}, not {type(getattr(self, name)).__name__}")
        if self.storage is not None and not isinstance(self.storage, StorageOptions):
            raise BadOptionType(f"storage must be a StorageOptions, not {type(self.storage).__name__}")
        for option in _OWN:
            setattr(self, option.target, option.kind.check(option_name(option.name), getattr(self, option.target)))
        self.clock_skew_s = kinds.bounded_number(option_name("clock_skew_s"), self.clock_skew_s, MAX_SECONDS,
                                                 "a number of seconds")
        self.silence = [check_id.upper() for check_id in self.silence]
        self.reports = _report_targets(self.reports)
        validate_selection(self)
        self._fill_from_level()

    def _fill_from_level(self) -> None:
        """--level long: its sustained load unless --device-sustain was given, and the storage family, whose
        path only the user can name (probes/levels.py; the plan's part of a level is probes/plan.py's)."""
        level = LEVELS[self.probes.level]
        if level.device_sustain_s and not self.device.sustain_s:
            self.device.sustain_s = level.device_sustain_s
        if level.storage and self.storage is None:
            raise BadInput(f"--level {level.name} runs the storage family: give it the checkpoint directory, "
                           f"--storage PATH (or PREFLIGHT_STORAGE), or choose --level standard")

    def __getattr__(self, name: str) -> Any:
        """A name RunOptions once had itself: say where it lives now (code merged from before the parts)."""
        if name in _MOVED:
            raise AttributeError(f"RunOptions has no {name!r}: it is options.{_MOVED[name]} (options/table.py)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @classmethod
    def build(cls, *, command_line: str = "", **given: Any) -> RunOptions:
        """RunOptions from options by the table's names (argparse's dests, preflight.check's keywords), as either
        door has them: an option not given takes the table's default, or its environment variable; the text
        options (--mesh, --sizes, --ops, --expect, --flaky, the storage flags) are parsed here, once."""
        unknown = sorted(set(given) - set(BY_NAME))
        if unknown:
            raise BadOptionType(f"no option {', '.join(map(repr, unknown))} (`preflight run --help` lists them)")
        values = {o.name: given.get(o.name, o.default) for o in OPTIONS}
        values["history"] = history_url(values["history"])
        values["storage"] = storage_path(values["storage"])
        for o in OPTIONS:
            if not o.target and o.kind is kinds.TEXT:
                o.kind.check(option_name(o.name), values[o.name])
        typed = {o.target: values[o.name] for o in OPTIONS if o.target}
        if values["flaky"]:
            typed["history.flaky_failures"], typed["history.flaky_window"] = parse_flaky(values["flaky"])
        rest, storage_expect = split_storage_expect(values["expect"])
        rest, typed["device.expect"] = split_device_expect(rest)
        rest, skew = split_clock_expect(rest)
        if skew is not None:
            typed["clock_skew_s"] = skew
        typed["probes.expect"] = parse_expect(rest)
        typed["probes.mesh"], typed["probes.sizes"] = parse_mesh_syntax(values["mesh"]), parse_sizes(values["sizes"])
        typed["probes.ops"] = parse_ops(values["ops"])
        storage = None
        if values["storage"] is not None:
            storage = storage_options(values["storage"], values["checkpoint_size"], values["storage_budget"],
                                      storage_expect)
        elif values["checkpoint_size"] or values["storage_budget"] or storage_expect:
            raise BadInput("--checkpoint-size, --storage-budget and --expect storage_*: only with --storage PATH "
                           "(or PREFLIGHT_STORAGE)")
        parts = {name: part(**{target.partition(".")[2]: value for target, value in typed.items()
                               if target.startswith(f"{name}.")}) for name, part in _PARTS.items()}
        own = {target: value for target, value in typed.items() if "." not in target}
        return cls(**parts, storage=storage, command_line=command_line, **own)

    def output_files(self) -> dict[str, str | None]:
        """The files besides the reports that rank 0 writes, by flag: --metrics, and a sqlite
        --history's database (None for PostgreSQL), checked before the run (reports/targets.py)."""
        files: dict[str, str | None] = {"--metrics": self.history.metrics}
        if self.history.url:
            from preflight.history.store import sqlite_file  # SQLAlchemy only when a history is asked for

            files["--history"] = sqlite_file(self.history.url)
        return files

    def for_world(self, world_size: int) -> RunOptions:
        """These options with the mesh resolved for world_size (BadInput when its arithmetic fails)."""
        return msgspec.structs.replace(self, probes=self.probes.for_world(world_size))

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

def _report_targets(targets: Any) -> ReportTargets:
    """The report targets with every path a str (PathLike accepted) and quiet a bool."""
    if not isinstance(targets, ReportTargets):
        raise BadOptionType(f"reports must be a ReportTargets, not {type(targets).__name__}")
    checked = {name: o.kind.check(option_name(name), getattr(targets, name))
               for o in _REPORTS if (name := o.target.partition(".")[2])}
    checked["retry_exclude"] = kinds.path("retry_exclude", targets.retry_exclude)
    return msgspec.structs.replace(targets, **checked)


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
