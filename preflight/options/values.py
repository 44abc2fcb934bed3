"""The options written as text, read into typed values: sizes, rates, op lists, --expect, --flaky.

Each parser takes the text as the command line (or a `preflight.check` keyword) spells it and
returns the typed value, or raises BadInput naming the flag: one line and exit 2 at the CLI, a
ValueError in the API. The bounds are written once, here or in the table (options/table.py).
"""

from __future__ import annotations

import re
from typing import Any

from preflight.lib.errors import BadInput
from preflight.lib.numbers import ascii_decimal, ascii_int, shown
from preflight.lib.storage_options import MAX_CHECKPOINT, StorageOptions
from preflight.lib.units import size_range
from preflight.model.probe_results import MAX_MESSAGE_BYTES

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
    if text.strip().startswith("-"):
        raise BadInput(f"{flag}: {shown(text)} is negative: a size is positive (e.g. 1M, 64MiB, 4096)")
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
    """A comma list of sizes and ranges (`1M:64M`, `1M:64M:x4`: lib/units.size_range), ascending, without
    duplicates; [] when empty (use the defaults)."""
    if not text.strip():
        return []
    sizes: set[int] = set()
    for part in _bounded_list(text, "--sizes"):
        sizes.update(size_range(part, parse_size) if ":" in part else [parse_size(part)])
    return sorted(sizes)


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


def parse_flaky(text: str) -> tuple[int, int]:
    """`3/10` -> (3, 10): failed in 3 of the last 10 recorded runs."""
    failures, sep, window = text.strip().partition("/")
    if not sep:
        raise BadInput(f"--flaky: {shown(text)} is not K/N (e.g. 3/10)")
    return (ascii_int(failures.strip(), "--flaky K", minimum=1, maximum=MAX_FLAKY_WINDOW),
            ascii_int(window.strip(), "--flaky N", minimum=1, maximum=MAX_FLAKY_WINDOW))
