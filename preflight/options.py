"""The run's options as typed values, parsed once where they enter and validated there.

Both front doors build the same `RunOptions`: the CLI (preflight/commands/cli.py) from its
flags, `preflight.check` (preflight/api.py) from its keywords; neither imports the other.
`RunOptions.parse` turns the options written as text (--mesh, --sizes, --ops, --expect) into
typed values, and `RunOptions.__post_init__` validates every field where the data enters, in
the manner of torchtitan's ParallelDims: its type (BadOptionType, also a TypeError: a
keyword of the wrong type in the API), its bounds (the limits below, written once) and the
tags and check ids of --only/--skip/--silence against the registry (BadInput). The CLI turns
either into one line and exit 2; the API into a TypeError / ValueError naming the keyword.
The mesh arithmetic needs the world size, known only after step 1 (or from `launch -n`):
`options.for_world(world_size)` resolves the mesh, derived `dp` included, and every later
stage reads `options.mesh` as resolved. Nothing after this module parses an option's text
or checks its bounds again.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from preflight.lib.errors import BadInput, BadOptionType
from preflight.lib.mesh_shape import WORLD_DIM, MeshDim, mesh_text, parse_mesh_syntax, resolve_dims
from preflight.lib.numbers import ascii_decimal, ascii_int, shown
from preflight.lib.storage_options import MAX_CHECKPOINT, StorageOptions
from preflight.model.probe_results import MAX_MESSAGE_BYTES
from preflight.registry import Tags, get_check
from preflight.reports.targets import ReportTargets

BACKENDS = ("auto", "nccl", "gloo")
LOCALIZE = ("auto", "pairwise", "grouptest")  # how slow groups are localized (probes/hosttest.choose)
OPS = ("all_reduce", "all_to_all", "all_gather", "reduce_scatter", "send_recv", "broadcast")

# Sizes as nccl-tests reads `-b 1M`: a bare K/M/G is binary (1M = 1,048,576 bytes); KiB/MiB/GiB say so
# explicitly, and KB/MB/GB are the SI (decimal) units, for whoever means them.
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30,
          "TIB": 2**40, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_SIZE = re.compile(r"([0-9.]{1,32})\s{0,8}([A-Za-z]{0,8})", re.ASCII)
MAX_SIZE = MAX_MESSAGE_BYTES  # 64 GiB: no collective probe message is larger
MAX_RATE = 1e6  # GB/s (1 PB/s): an --expect above it is a typo
# Rates, stored in GB/s (1e9 B/s, nccl-tests' busbw unit): GB/s, MB/s, TB/s are SI; GiB/s, MiB/s and a
# bare G/s, M/s, K/s are binary as in --sizes; Gb/s, Gbit/s, Gbps are bits. A bare number is GB/s.
_RATE_UNITS = {"GB/S": 1.0, "MB/S": 1e-3, "KB/S": 1e-6, "TB/S": 1e3, "GIB/S": 2**30 / 1e9, "MIB/S": 2**20 / 1e9,
               "KIB/S": 2**10 / 1e9, "G/S": 2**30 / 1e9, "M/S": 2**20 / 1e9, "K/S": 2**10 / 1e9, "GBIT/S": 1 / 8}
_RATE = re.compile(r"([0-9.]{1,32})\s{0,8}([A-Za-z/]{0,8})", re.ASCII)
MAX_FLAKY_WINDOW = 1000  # --flaky K/N: more runs than that is not "recent"
MAX_LIST_CHARS = 4096  # --sizes, --ops, --expect: longer is not a list anyone typed
MAX_SECONDS = 7 * 24 * 3600.0  # a timeout above a week is a typo (and inf or nan is never a deadline)
MAX_COUNT = 1_000_000  # --warmup, --iters
MAX_RATIO = 1.0  # --straggler-ratio: a share of the siblings' median, 0 < RATIO <= 1 (as its help says)
# A host's wall clock more than 1 s off rank 0's (beyond the measurement's error bar) is CLK001. Any
# running time daemon keeps hosts within milliseconds, and the estimate's error on a loaded store is
# tens of ms, so 1 s is never noise; yet 1 s already misorders logs, NCCL flight-recorder dumps and
# checkpoint timestamps across hosts, and drift grows until time-based timeouts disagree.
CLOCK_SKEW_S = 1.0

# Each field's name as the two front doors spell it: the API's keyword, the CLI's flag.
FLAGS = {"timeout_s": "--timeout", "check_timeout_s": "--check-timeout", "probe_timeout_s": "--probe-timeout",
         "straggler_ratio": "--straggler-ratio", "silence": "--silence", "only": "--only", "skip": "--skip",
         "strict": "--strict", "strict_bandwidth": "--strict-bandwidth", "warmup": "--warmup", "iters": "--iters",
         "out_dir": "--out-dir", "run_id": "--run-id", "sizes": "--sizes", "ops": "--ops", "expect": "--expect",
         "json": "--json", "html": "--html", "junit": "--junit", "text": "--text", "exclude": "--exclude-file",
         "quiet": "--quiet", "backend": "--backend", "localize": "--localize",
         "device_budget_s": "--device-budget", "device_sustain_s": "--device-sustain", "history": "--history",
         "history_timeout_s": "--history-timeout", "metrics": "--metrics", "flaky_failures": "--flaky",
         "flaky_window": "--flaky", "storage": "--storage", "checkpoint_size": "--checkpoint-size",
         "storage_budget": "--storage-budget", "fingerprint": "--fingerprint", "clock_skew_s": "--expect clock_skew"}


@dataclass
class RunOptions:
    """Everything `preflight run` was asked to do, as typed values.

    Per-value checks happen in the parsers below (and in argparse's converters); __post_init__
    checks what ties fields together: the mesh against the world size once that is known, and
    every --expect dimension against the mesh.
    """

    timeout_s: float = 60.0  # rank 0 waits at most this long for every rank to report
    check_timeout_s: float = 10.0  # one check or fact gatherer may take at most this long
    out_dir: str | None = None
    run_id: str | None = None
    silence: list[str] = field(default_factory=list)  # check ids, upper case
    only: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    strict: bool = False
    reports: ReportTargets = field(default_factory=ReportTargets)
    # probes
    # Outermost first. Before for_world: as written (a wildcard size is WILDCARD, no derived dp);
    # after: resolved, its product is world_size and the remainder is a dimension (dp, or the wildcard).
    # [] without --mesh (the probes then measure the whole world).
    mesh: list[MeshDim] = field(default_factory=list)
    world_size: int | None = None  # set by for_world(); None until the world is known
    backend: str = "auto"
    ops: list[str] = field(default_factory=list)  # [] : the plan's defaults
    sizes: list[int] = field(default_factory=list)  # bytes, ascending; [] : the plan's defaults per device
    warmup: int | None = None  # None: the plan's default per device
    iters: int | None = None
    probe_timeout_s: float = 30.0
    straggler_ratio: float = 0.8
    strict_bandwidth: bool = False  # a group below its hardware profile is an error (BW007), not a warning (BW011)
    localize: str = "auto"  # auto | pairwise (never group testing) | grouptest (whenever it can run)
    expect: dict[str, float] = field(default_factory=dict)  # expected busbw per dimension, GB/s
    # device probes (probes/device/family.py): --expect's device figures (TFLOP/s, GB/s) by name,
    # the family's time budget per device (None: its default per device kind), sustained load
    device_expect: dict[str, float] = field(default_factory=dict)
    device_budget_s: float | None = None
    device_sustain_s: float = 0.0
    # history (docs/history.md)
    history: str = ""  # --history / PREFLIGHT_HISTORY: sqlite:///path or postgresql://...; "" none
    history_timeout_s: float = 10.0  # every wait on the history (lock, connect, statement), each side of the verdict
    metrics: str | None = None  # --metrics: Prometheus textfile for node_exporter
    flaky_failures: int = 3  # --flaky K/N: failed in K ...
    flaky_window: int = 10  # ... of its last N recorded runs
    # the storage family (steps/storage.py): None without --storage / PREFLIGHT_STORAGE
    storage: StorageOptions | None = None
    # facts
    sysfs_root: str = "/sys"
    fingerprint: list[str] = field(default_factory=list)  # --fingerprint: distributions beyond torch/nvidia-*
    clock_skew_s: float = CLOCK_SKEW_S  # --expect clock_skew=: a host's clock this far off rank 0's is CLK001
    verdict_file: str | None = None  # `preflight launch` reads rank 0's code here
    command_line: str = ""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "check_timeout_s", "probe_timeout_s"):
            setattr(self, name, bounded_seconds(name, getattr(self, name)))
        self.straggler_ratio = _bounded_number("straggler_ratio", self.straggler_ratio, MAX_RATIO, "a number")
        if self.device_budget_s is not None:
            self.device_budget_s = _bounded_number("device_budget_s", self.device_budget_s, MAX_SECONDS,
                                                   "a number of seconds")
        if self.device_sustain_s != 0:
            self.device_sustain_s = _bounded_number("device_sustain_s", self.device_sustain_s, MAX_SECONDS,
                                                    "a number of seconds")
        self.warmup, self.iters = _count("warmup", self.warmup), _count("iters", self.iters)
        for name in ("strict", "strict_bandwidth"):
            _flag(name, getattr(self, name))
        self.only, self.skip = _names("only", self.only), _names("skip", self.skip)
        self.fingerprint = _names("fingerprint", self.fingerprint)
        self.clock_skew_s = _bounded_number("clock_skew_s", self.clock_skew_s, MAX_SECONDS, "a number of seconds")
        self.silence = [check_id.upper() for check_id in _names("silence", self.silence)]
        self.out_dir = _path("out_dir", self.out_dir)
        self.reports = _report_targets(self.reports)
        if self.backend not in BACKENDS:
            raise BadInput(f"--backend {shown(str(self.backend))}: one of {', '.join(BACKENDS)}")
        if self.localize not in LOCALIZE:
            raise BadInput(f"--localize {shown(str(self.localize))}: one of {', '.join(LOCALIZE)}")
        validate_selection(self)
        if not isinstance(self.history, str):
            raise BadOptionType(f"{option_name('history')} must be a URL string, not {type(self.history).__name__}")
        if self.history:
            check_history_url(self.history)
        self.metrics = _path("metrics", self.metrics)
        self.history_timeout_s = bounded_seconds("history_timeout_s", self.history_timeout_s)
        for name in ("flaky_failures", "flaky_window"):
            if _count(name, getattr(self, name)) is None:
                raise BadOptionType(f"{option_name(name)} must be a whole number, not None")
        check_flaky(self.flaky_failures, self.flaky_window)
        if self.storage is not None and not isinstance(self.storage, StorageOptions):
            raise BadOptionType(f"storage must be a StorageOptions, not {type(self.storage).__name__}")
        if self.world_size is not None:
            self.mesh = resolve_dims(self.mesh, self.world_size)
        names = {d.name for d in self.mesh} | {WORLD_DIM} | ({"dp"} if self.world_size is None else set())
        for name in self.expect:
            if name not in names:
                raise BadInput(f"--expect {name}=...: no mesh dimension {name!r} "
                               f"(mesh: {mesh_text(self.mesh) or 'none'})")

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


def option_name(name: str) -> str:
    """A field as both front doors spell it: `timeout_s (--timeout)`."""
    flag = FLAGS.get(name)
    return f"{name} ({flag})" if flag else name


def _bounded_number(name: str, value: Any, maximum: float, what: str) -> float:
    """A number above 0 and at most `maximum` (never a bool, inf or nan), as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadOptionType(f"{option_name(name)} must be {what}, not {type(value).__name__}")
    if not (math.isfinite(value) and 0 < value <= maximum):
        raise BadInput(f"{option_name(name)}={value!r}: must be above 0 and at most {maximum:g}")
    return float(value)


def bounded_seconds(name: str, value: Any) -> float:
    """A timeout in seconds: above 0, at most MAX_SECONDS (RunOptions' and `preflight history`'s alike)."""
    return _bounded_number(name, value, MAX_SECONDS, "a number of seconds")


def check_flaky(failures: int, window: int) -> None:
    """--flaky K/N as both `preflight run` and `preflight history exclude` take it: 1 <= K <= N <= the cap."""
    if not 1 <= failures <= window <= MAX_FLAKY_WINDOW:
        raise BadInput(f"--flaky {failures}/{window}: K/N with 1 <= K <= N <= {MAX_FLAKY_WINDOW}")


def _count(name: str, value: Any) -> int | None:
    """None (the plan's default) or a whole number 0..MAX_COUNT."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadOptionType(f"{option_name(name)} must be a whole number or None, not {type(value).__name__}")
    if not 0 <= value <= MAX_COUNT:
        raise BadInput(f"{option_name(name)}={value!r}: must be 0 to {MAX_COUNT}")
    return value


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise BadOptionType(f"{option_name(name)} must be True or False, not {type(value).__name__}")


def _names(name: str, value: Any) -> list[str]:
    """A list of strings from any sequence of them (never one string, which would be its letters)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not all(
            isinstance(item, str) for item in value):
        raise BadOptionType(f"{option_name(name)} must be a list of strings, not {type(value).__name__}")
    if len(value) > MAX_LIST_CHARS:
        raise BadInput(f"{option_name(name)}: {len(value)} entries, at most {MAX_LIST_CHARS}")
    return list(value)


def _path(name: str, value: Any) -> str | None:
    """None or a path (str or os.PathLike), as a str."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise BadOptionType(f"{option_name(name)} must be a path or None, not {type(value).__name__}")
    path = os.fspath(value)
    if not isinstance(path, str):
        raise BadOptionType(f"{option_name(name)} must be a text path, not bytes")
    return path


def _report_targets(targets: Any) -> ReportTargets:
    """The report targets with every path a str (PathLike accepted) and quiet a bool."""
    if not isinstance(targets, ReportTargets):
        raise BadOptionType(f"reports must be a ReportTargets, not {type(targets).__name__}")
    _flag("quiet", targets.quiet)
    paths = {name: _path(name, getattr(targets, name))
             for name in ("json", "html", "junit", "text", "exclude", "retry_exclude")}
    return dataclasses.replace(targets, **paths)


def validate_selection(options: RunOptions) -> None:
    """Reject unknown tags and check ids before any rank starts (the registry knows them)."""
    for tag in (*options.only, *options.skip):
        if tag not in Tags.all():
            raise BadInput(f"unknown tag {shown(tag)}; known tags: {', '.join(Tags.all())}")
    for check_id in options.silence:
        if get_check(check_id) is None:
            raise BadInput(f"--silence {shown(check_id)}: no such check id (see `preflight list`)")


def parse_seconds(text: str) -> float:
    """`--timeout` and kin as written: a positive ASCII decimal, at most MAX_SECONDS (no exponent, inf, nan, `٣`)."""
    if text.strip().startswith("-"):
        raise BadInput(f"{shown(text)} must be positive")
    value = ascii_decimal(text, "value", maximum=MAX_SECONDS)
    if value <= 0:
        raise BadInput(f"{shown(text)} must be positive")
    return value


def parse_count(text: str) -> int:
    """`--warmup` / `--iters` as written: 0 to MAX_COUNT in ASCII digits."""
    return ascii_int(text, "value", minimum=0, maximum=MAX_COUNT)


def parse_size(text: str, flag: str = "--sizes", maximum: int = MAX_SIZE) -> int:
    """`64M` and `64MiB` -> 67_108_864, `64MB` -> 64_000_000, `4096` -> 4096 (K/M/G binary, as nccl-tests);
    T/TiB/TB too, for a checkpoint's size."""
    match = _SIZE.fullmatch(text.strip())
    unit = match.group(2).upper() if match else ""
    if not match or unit not in _UNITS:
        raise BadInput(f"{flag}: {shown(text)} is not a size (e.g. 1M, 64MiB, 4096)")
    number = ascii_decimal(match.group(1), flag)
    if number * _UNITS[unit] > maximum:
        raise BadInput(f"{flag}: {shown(text)} is above the maximum {maximum} bytes")
    value = int(number * _UNITS[unit])
    if value <= 0:
        raise BadInput(f"{flag}: {shown(text)} must be positive")
    return value


def _bounded_list(text: str, flag: str) -> list[str]:
    if len(text) > MAX_LIST_CHARS:
        raise BadInput(f"{flag}: {shown(text)} is longer than {MAX_LIST_CHARS} characters")
    return text.split(",")


def parse_sizes(text: str) -> list[int]:
    """A comma list of sizes, ascending, without duplicates; [] when empty (use the defaults)."""
    if not text.strip():
        return []
    return sorted({parse_size(part) for part in _bounded_list(text, "--sizes")})


def parse_ops(text: str) -> list[str]:
    """A comma list of op names; [] when empty (use the defaults)."""
    if not text.strip():
        return []
    ops = []
    for part in _bounded_list(text, "--ops"):
        name = part.strip().replace("-", "_")
        if name not in OPS:
            raise BadInput(f"--ops: unknown op {shown(part.strip())}; known: {', '.join(OPS)}")
        if name not in ops:
            ops.append(name)
    return ops


def parse_rate(text: str) -> float:
    """`300GB/s` -> 300.0 (GB/s, GB = 1e9 B); `1G/s` and `1GiB/s` -> 1.073741824; `400Gb/s` -> 50.0; a bare
    number is GB/s."""
    match = _RATE.fullmatch(text.strip())
    if not match:
        raise BadInput(f"--expect: {shown(text)} is not a rate (e.g. 300GB/s, 400Gb/s)")
    number, unit = ascii_decimal(match.group(1), "--expect"), match.group(2)
    if unit in ("Gb/s", "Gbit/s", "Gbps"):
        key = "GBIT/S"
    elif unit == "":
        key = "GB/S"
    else:
        key = unit.upper()
    if key not in _RATE_UNITS or number <= 0:
        raise BadInput(f"--expect: {shown(text)} is not a positive rate in GB/s, MB/s, GiB/s, G/s (binary) or Gb/s")
    if number * _RATE_UNITS[key] > MAX_RATE:
        raise BadInput(f"--expect: {shown(text)} is above the maximum {MAX_RATE:g} GB/s")
    return number * _RATE_UNITS[key]


# --expect's device figures: name -> unit kind. `gemm` is the device's headline product (bf16 on a
# GPU, fp32 on CPU), `hbm` its memory copy (bytes read + written).
DEVICE_FIGURES = {"gemm": "flops", "gemm_bf16": "flops", "gemm_fp16": "flops", "gemm_tf32": "flops",
                  "gemm_fp32": "flops", "hbm": "bytes", "copy": "bytes", "h2d": "bytes", "d2h": "bytes"}
_FLOPS = re.compile(r"([0-9.]{1,32})\s{0,8}(TFLOPS|TFLOP/S|TF|TFLOPS/S|GFLOPS|GFLOP/S|PFLOPS|PFLOP/S)?", re.ASCII)
_FLOPS_SCALE = {"": 1.0, "TF": 1.0, "TFLOPS": 1.0, "TFLOP/S": 1.0, "TFLOPS/S": 1.0, "GFLOPS": 1e-3, "GFLOP/S": 1e-3,
                "PFLOPS": 1e3, "PFLOP/S": 1e3}
MAX_TFLOPS = 1e6  # an --expect above an exaflop per device is a typo


def parse_flops(text: str) -> float:
    """`700TFLOPS` -> 700.0 (TFLOP/s); GFLOPS and PFLOPS scale; a bare number is TFLOP/s."""
    match = _FLOPS.fullmatch(text.strip().upper())
    if not match:
        raise BadInput(f"--expect: {shown(text)} is not a compute rate (e.g. 700TFLOPS)")
    value = ascii_decimal(match.group(1), "--expect") * _FLOPS_SCALE[match.group(2) or ""]
    if value <= 0 or value > MAX_TFLOPS:
        raise BadInput(f"--expect: {shown(text)} is not a compute rate between 0 and {MAX_TFLOPS:g} TFLOP/s")
    return value


def split_device_expect(text: str) -> tuple[str, dict[str, float]]:
    """`tp=300GB/s,gemm=700TFLOPS,hbm=2.8TB/s` -> ("tp=300GB/s", {"gemm": 700.0, "copy": 2800.0}).

    The device figures (DEVICE_FIGURES) are taken out and parsed here; the rest is left for
    parse_expect (mesh dimensions). `hbm` is stored as `copy`, the figure it sets.
    """
    if not text.strip():
        return text, {}
    rest, device = [], {}
    for part in _bounded_list(text, "--expect"):
        name = part.partition("=")[0].strip()
        if name not in DEVICE_FIGURES:
            rest.append(part)
            continue
        rate = part.partition("=")[2]
        figure = "copy" if name == "hbm" else name
        device[figure] = parse_flops(rate) if DEVICE_FIGURES[name] == "flops" else parse_rate(rate)
    return ",".join(rest), device


STORAGE_FIGURES = ("storage_write", "storage_read")  # --expect's storage figures: GB/s per host


def split_storage_expect(text: str) -> tuple[str, dict[str, float]]:
    """`tp=300GB/s,storage_write=2GB/s` -> ("tp=300GB/s", {"storage_write": 2.0}): the storage figures
    taken out and parsed; the rest is left for the device and mesh figures."""
    if not text.strip():
        return text, {}
    rest, storage = [], {}
    for part in _bounded_list(text, "--expect"):
        name, _, rate = part.partition("=")
        if name.strip() in STORAGE_FIGURES:
            storage[name.strip()] = parse_rate(rate)
        else:
            rest.append(part)
    return ",".join(rest), storage


def storage_options(path: Any, checkpoint_size: str, budget: str, expect: dict[str, float]) -> StorageOptions:
    """The storage family's options from --storage, --checkpoint-size, --storage-budget as written and
    --expect's storage figures; StorageOptions checks the path (BadInput: exit 2 before the run)."""
    return StorageOptions(
        path, checkpoint_size=parse_size(checkpoint_size, "--checkpoint-size", MAX_CHECKPOINT) if checkpoint_size
        else None, **({"budget": parse_size(budget, "--storage-budget")} if budget else {}),
        expect_write=expect.get("storage_write"), expect_read=expect.get("storage_read"))


def split_clock_expect(text: str) -> tuple[str, float | None]:
    """`tp=300GB/s,clock_skew=250ms` -> ("tp=300GB/s", 0.25): the clock threshold taken out (s, ms)."""
    if "clock_skew" not in text:
        return text, None
    rest, skew = [], None
    for part in _bounded_list(text, "--expect"):
        name, _, value = part.partition("=")
        if name.strip() != "clock_skew":
            rest.append(part)
            continue
        match = re.fullmatch(r"([0-9.]{1,20})\s{0,4}(ms|s)?", value.strip(), re.ASCII)
        if not match:
            raise BadInput(f"--expect clock_skew={shown(value)}: a duration such as 500ms or 2s")
        skew = ascii_decimal(match.group(1), "--expect clock_skew") / (1000.0 if match.group(2) == "ms" else 1.0)
    return ",".join(rest), skew


def parse_expect(text: str) -> dict[str, float]:
    """`tp=300GB/s,dp=40GB/s` -> {"tp": 300.0, "dp": 40.0} (busbw in GB/s)."""
    expected: dict[str, float] = {}
    if not text.strip():
        return expected
    for part in _bounded_list(text, "--expect"):
        name, sep, rate = part.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"--expect: {shown(part.strip())} is not DIM=RATE (e.g. tp=300GB/s)")
        expected[name.strip()] = parse_rate(rate)
    return expected


def history_url(given: Any) -> Any:
    """--history / `history=` when given, else $PREFLIGHT_HISTORY, else "" (no history): the one
    place every front door (run, `preflight history`, preflight.check) resolves it."""
    return given if given is not None else os.environ.get("PREFLIGHT_HISTORY", "")


def check_history_url(url: str) -> str:
    """The --history URL when it is one preflight can use (sqlite:///path, postgresql://...); else BadInput."""
    from preflight.history.store import HistoryError, check_url  # SQLAlchemy only when a history is asked for

    if len(url) > MAX_LIST_CHARS:
        raise BadInput(f"--history: {shown(url)} is longer than {MAX_LIST_CHARS} characters")
    try:
        return check_url(url)
    except HistoryError as exc:
        raise BadInput(f"--history: {exc}") from None


def parse_flaky(text: str) -> tuple[int, int]:
    """`3/10` -> (3, 10): failed in 3 of the last 10 recorded runs."""
    failures, sep, window = text.strip().partition("/")
    if not sep:
        raise BadInput(f"--flaky: {shown(text)} is not K/N (e.g. 3/10)")
    return (ascii_int(failures.strip(), "--flaky K", minimum=1, maximum=MAX_FLAKY_WINDOW),
            ascii_int(window.strip(), "--flaky N", minimum=1, maximum=MAX_FLAKY_WINDOW))
