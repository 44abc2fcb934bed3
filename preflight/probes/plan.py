"""What the probes will do, parsed from the options: ops, sizes, iterations, expectations.

Every parser raises BadInput with one line, so `cli.validate_options` can reject bad values
before any rank starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from preflight.lib.errors import BadInput
from preflight.lib.mesh_shape import WORLD_DIM, MeshDim, parse_mesh_syntax, resolve_mesh
from preflight.options import RunOptions

OPS = ("all_reduce", "all_to_all", "all_gather", "reduce_scatter", "send_recv", "broadcast")
DEFAULT_OPS = ("all_reduce", "all_to_all")
# Sizes small enough for a 2-core CI box on CPU; the GPU defaults are nccl-tests-like.
DEFAULT_SIZES = {"cpu": (1 << 20, 4 << 20), "cuda": (1 << 20, 64 << 20, 256 << 20)}
DEFAULT_WARMUP = {"cpu": 2, "cuda": 5}
DEFAULT_ITERS = {"cpu": 5, "cuda": 20}

_UNITS = {"": 1, "B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "KB": 10**3, "MB": 10**6, "GB": 10**9,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([A-Za-z]*)$")
# Rates: bytes per second (GB/s, MB/s, GiB/s) or bits (Gb/s, Gbit/s, Gbps); GB = 1e9 B.
_RATE_UNITS = {"GB/S": 1.0, "MB/S": 1e-3, "GIB/S": 2**30 / 1e9, "TB/S": 1e3, "GBIT/S": 1 / 8}
_RATE = re.compile(r"^(\d+(?:\.\d+)?)\s*([A-Za-z/]*)$")


def parse_size(text: str) -> int:
    """`64M` -> 64_000_000, `64MiB` -> 67_108_864, `4096` -> 4096 (K/M/G decimal, KiB/MiB/GiB binary)."""
    match = _SIZE.match(text.strip())
    unit = match.group(2).upper() if match else ""
    if not match or unit not in _UNITS:
        raise BadInput(f"--sizes: {text!r} is not a size (e.g. 1M, 64MiB, 4096)")
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise BadInput(f"--sizes: {text!r} must be positive")
    return value


def parse_sizes(text: str) -> list[int]:
    """A comma list of sizes, ascending, without duplicates; [] when empty (use the defaults)."""
    if not text.strip():
        return []
    return sorted({parse_size(part) for part in text.split(",")})


def parse_ops(text: str) -> list[str]:
    """A comma list of op names; [] when empty (use the defaults)."""
    if not text.strip():
        return []
    ops = []
    for part in text.split(","):
        name = part.strip().replace("-", "_")
        if name not in OPS:
            raise BadInput(f"--ops: unknown op {part.strip()!r}; known: {', '.join(OPS)}")
        if name not in ops:
            ops.append(name)
    return ops


def parse_rate(text: str) -> float:
    """`300GB/s` -> 300.0 (GB/s, GB = 1e9 B); `400Gb/s` -> 50.0; a bare number is GB/s."""
    match = _RATE.match(text.strip())
    if not match:
        raise BadInput(f"--expect: {text!r} is not a rate (e.g. 300GB/s, 400Gb/s)")
    number, unit = float(match.group(1)), match.group(2)
    if unit in ("Gb/s", "Gbit/s", "Gbps"):
        key = "GBIT/S"
    elif unit == "":
        key = "GB/S"
    else:
        key = unit.upper()
    if key not in _RATE_UNITS or number <= 0:
        raise BadInput(f"--expect: {text!r} is not a positive rate in GB/s, MB/s, GiB/s or Gb/s")
    return number * _RATE_UNITS[key]


def parse_expect(text: str) -> dict[str, float]:
    """`tp=300GB/s,dp=40GB/s` -> {"tp": 300.0, "dp": 40.0} (busbw in GB/s)."""
    expected: dict[str, float] = {}
    if not text.strip():
        return expected
    for part in text.split(","):
        name, sep, rate = part.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"--expect: {part.strip()!r} is not DIM=RATE (e.g. tp=300GB/s)")
        expected[name.strip()] = parse_rate(rate)
    return expected


@dataclass
class ProbePlan:
    """The resolved plan: mesh dimensions, ops per dimension, sizes, iterations."""

    dims: list[MeshDim]
    ops: list[str]
    sizes: list[int]
    warmup: int
    iters: int
    world_all_reduce: bool  # the default plan adds one whole-world all_reduce
    expect: dict[str, float] = field(default_factory=dict)

    def steps(self) -> list[tuple[str, str, int]]:
        """(dim, op, size) in the order every rank runs them; send_recv only on pp."""
        out = []
        for dim in self.dims:
            for op in self.ops:
                if op == "send_recv" and dim.name != "pp" and len(self.dims) > 1:
                    continue
                if dim.size < 2 and len(self.dims) > 1:
                    continue  # a size-1 dimension has nothing to move (a lone rank still measures itself)
                out += [(dim.name, op, size) for size in self.sizes]
        if self.world_all_reduce and not any(d.name == WORLD_DIM for d in self.dims):
            out += [(WORLD_DIM, "all_reduce", size) for size in self.sizes]
        return out


def validate_probe_options(options: RunOptions, world_size: int | None = None) -> None:
    """Reject a bad --mesh / --sizes / --ops / --expect before any rank starts."""
    dims = parse_mesh_syntax(options.mesh)
    if world_size is not None:
        dims = resolve_mesh(options.mesh, world_size)
    parse_sizes(options.sizes)
    parse_ops(options.ops)
    expected = parse_expect(options.expect)
    names = {d.name for d in dims} | {WORLD_DIM} | ({"dp"} if world_size is None else set())
    for name in expected:
        if name not in names:
            raise BadInput(f"--expect {name}=...: no mesh dimension {name!r} (mesh: {options.mesh or 'none'})")


def build_plan(options: RunOptions, world_size: int, device: str) -> ProbePlan:
    """The plan for this world: the mesh resolved, defaults filled per device (cpu / cuda)."""
    dims = resolve_mesh(options.mesh, world_size) or [MeshDim(WORLD_DIM, world_size)]
    ops = parse_ops(options.ops)
    return ProbePlan(
        dims=dims,
        ops=ops or list(DEFAULT_OPS),
        sizes=parse_sizes(options.sizes) or list(DEFAULT_SIZES[device]),
        warmup=DEFAULT_WARMUP[device] if options.warmup is None else options.warmup,
        iters=max(1, DEFAULT_ITERS[device] if options.iters is None else options.iters),
        world_all_reduce=not ops and len(dims) > 1,
        expect=parse_expect(options.expect),
    )
