"""The run's options as typed values, parsed once where they enter and validated there.

`RunOptions.parse` turns the flags written as text (--mesh, --sizes, --ops, --expect) into
typed values; the CLI calls it once per process, and a bad value is BadInput: one line,
exit 2. The mesh arithmetic needs the world size, known only after step 1 (or from
`launch -n`): `options.for_world(world_size)` resolves the mesh, derived `dp` included,
and every later stage reads `options.mesh` as resolved. Nothing after this module parses
an option's text again. Plain dataclasses, in the manner of torchtitan's ParallelDims.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from preflight.lib.errors import BadInput
from preflight.lib.mesh_shape import WORLD_DIM, MeshDim, mesh_text, parse_mesh_syntax, resolve_dims
from preflight.lib.numbers import ascii_decimal, ascii_int, shown
from preflight.registry import Tags
from preflight.reports.targets import ReportTargets

BACKENDS = ("auto", "nccl", "gloo")
LOCALIZE = ("auto", "pairwise", "grouptest")  # how slow groups are localized (probes/hosttest.choose)
OPS = ("all_reduce", "all_to_all", "all_gather", "reduce_scatter", "send_recv", "broadcast")

_UNITS = {"": 1, "B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "KB": 10**3, "MB": 10**6, "GB": 10**9,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
_SIZE = re.compile(r"([0-9.]{1,32})\s{0,8}([A-Za-z]{0,8})", re.ASCII)
MAX_SIZE = 2**36  # 64 GiB: no collective probe message is larger
MAX_RATE = 1e6  # GB/s (1 PB/s): an --expect above it is a typo
# Rates: bytes per second (GB/s, MB/s, GiB/s) or bits (Gb/s, Gbit/s, Gbps); GB = 1e9 B.
_RATE_UNITS = {"GB/S": 1.0, "MB/S": 1e-3, "GIB/S": 2**30 / 1e9, "TB/S": 1e3, "GBIT/S": 1 / 8}
_RATE = re.compile(r"([0-9.]{1,32})\s{0,8}([A-Za-z/]{0,8})", re.ASCII)
MAX_FLAKY_WINDOW = 1000  # --flaky K/N: more runs than that is not "recent"
MAX_LIST_CHARS = 4096  # --sizes, --ops, --expect: longer is not a list anyone typed


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
    # history (docs/history.md)
    history: str = ""  # --history / PREFLIGHT_HISTORY: sqlite:///path or postgresql://...; "" none
    history_timeout_s: float = 10.0  # every wait on the history (lock, connect, statement), each side of the verdict
    metrics: str | None = None  # --metrics: Prometheus textfile for node_exporter
    flaky_failures: int = 3  # --flaky K/N: failed in K ...
    flaky_window: int = 10  # ... of its last N recorded runs
    # facts
    sysfs_root: str = "/sys"
    verdict_file: str | None = None  # `preflight launch` reads rank 0's code here
    command_line: str = ""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise BadInput(f"--backend {self.backend!r}: one of {', '.join(BACKENDS)}")
        if self.localize not in LOCALIZE:
            raise BadInput(f"--localize {self.localize!r}: one of {', '.join(LOCALIZE)}")
        self.silence = [check_id.upper() for check_id in self.silence]
        if self.history:
            check_history_url(self.history)
        if not 1 <= self.flaky_failures <= self.flaky_window <= MAX_FLAKY_WINDOW:
            raise BadInput(f"--flaky {self.flaky_failures}/{self.flaky_window}: K/N with 1 <= K <= N <= "
                           f"{MAX_FLAKY_WINDOW}")
        if self.world_size is not None:
            self.mesh = resolve_dims(self.mesh, self.world_size)
        names = {d.name for d in self.mesh} | {WORLD_DIM} | ({"dp"} if self.world_size is None else set())
        for name in self.expect:
            if name not in names:
                raise BadInput(f"--expect {name}=...: no mesh dimension {name!r} "
                               f"(mesh: {mesh_text(self.mesh) or 'none'})")

    @classmethod
    def parse(cls, *, mesh: str = "", sizes: str = "", ops: str = "", expect: str = "", flaky: str = "",
              **typed: Any) -> RunOptions:
        """RunOptions from --mesh, --sizes, --ops, --expect and --flaky as written, plus the fields already typed."""
        if flaky:
            typed["flaky_failures"], typed["flaky_window"] = parse_flaky(flaky)
        return cls(mesh=parse_mesh_syntax(mesh), sizes=parse_sizes(sizes), ops=parse_ops(ops),
                   expect=parse_expect(expect), **typed)

    def for_world(self, world_size: int) -> RunOptions:
        """These options with the mesh resolved for world_size (BadInput when its arithmetic fails)."""
        return dataclasses.replace(self, world_size=world_size)

    def probes_enabled(self) -> bool:
        """Probes run unless `--skip probe`, or `--only` names tags without `probe`."""
        if Tags.PROBE in self.skip:
            return False
        return not self.only or Tags.PROBE in self.only


def parse_size(text: str) -> int:
    """`64M` -> 64_000_000, `64MiB` -> 67_108_864, `4096` -> 4096 (K/M/G decimal, KiB/MiB/GiB binary)."""
    match = _SIZE.fullmatch(text.strip())
    unit = match.group(2).upper() if match else ""
    if not match or unit not in _UNITS:
        raise BadInput(f"--sizes: {shown(text)} is not a size (e.g. 1M, 64MiB, 4096)")
    number = ascii_decimal(match.group(1), "--sizes")
    if number * _UNITS[unit] > MAX_SIZE:
        raise BadInput(f"--sizes: {shown(text)} is above the maximum {MAX_SIZE} bytes (64 GiB)")
    value = int(number * _UNITS[unit])
    if value <= 0:
        raise BadInput(f"--sizes: {shown(text)} must be positive")
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
    """`300GB/s` -> 300.0 (GB/s, GB = 1e9 B); `400Gb/s` -> 50.0; a bare number is GB/s."""
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
        raise BadInput(f"--expect: {shown(text)} is not a positive rate in GB/s, MB/s, GiB/s or Gb/s")
    if number * _RATE_UNITS[key] > MAX_RATE:
        raise BadInput(f"--expect: {shown(text)} is above the maximum {MAX_RATE:g} GB/s")
    return number * _RATE_UNITS[key]


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
