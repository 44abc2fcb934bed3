"""Numbers as people read them: byte counts (1048576 -> `1 MiB`), percentages, counts."""

from __future__ import annotations

from collections.abc import Callable

from preflight.lib.errors import BadInput
from preflight.lib.numbers import ascii_int, shown


def human_bytes(size: int) -> str:
    """1048576 -> '1 MiB', 1536 -> '1.5 KiB', 512 -> '512 B', 80025714114 -> '74.5 GiB' (three significant
    digits, never an exponent)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            break
        value /= 1024
    if unit == "B" or value >= 100:
        return f"{value:.0f} {unit}"
    return f"{float(f'{value:.3g}'):g} {unit}"



def percent(fraction: float) -> str:
    """A fraction as a percentage that keeps two significant digits under 10%: 0.0037 -> `0.37%`, 0.42 -> `42%`.

    `0%` for a figure that is 0.37% of its expectation reads as nothing measured; a real slowdown
    never rounds to 0%."""
    if fraction >= 0.1 or fraction <= 0:
        return f"{fraction:.0%}"
    if fraction < 1e-5:
        return "under 0.001%"
    return f"{fraction * 100:#.2g}%"


def count(n: int) -> str:
    """A count with thousands separators: 16239519 -> `16,239,519`."""
    return f"{n:,}"


def file_size(size: int) -> str:
    """A file's size as `ls -h --si` and browsers say it: 36_512 -> `37 kB`, 900 -> `900 B`."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            break
        value /= 1000
    return f"{value:.0f} {unit}" if unit == "B" or value >= 10 else f"{value:.1f} {unit}"


MAX_RANGE_SIZES = 64  # a size range longer than this is not a plan anyone means to wait for


def size_range(text: str, read_size: Callable[[str], int], flag: str = "--sizes") -> list[int]:
    """nccl-tests' -b/-e/-f as one word: `1M:64M` doubles (1, 2, 4, ... 64 MiB), `1M:64M:x4` multiplies by 4
    (1, 4, 16, 64 MiB), `1M:4M:+1M` adds 1 MiB (1, 2, 3, 4 MiB). The end is included when a step lands on it,
    as nccl-tests runs it; `read_size` reads each size (the option's own units and bounds).
    """
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise BadInput(f"{flag}: {shown(text)} is not a range: BEGIN:END, BEGIN:END:xFACTOR or BEGIN:END:+STEP")
    begin, end = read_size(parts[0]), read_size(parts[1])
    if end < begin:
        raise BadInput(f"{flag}: {shown(text)} ends below its start")
    step = parts[2].strip() if len(parts) == 3 else "x2"
    if step[:1] in ("x", "*"):
        factor = ascii_int(step[1:], f"{flag} factor", minimum=2, maximum=1024)
        sizes = [begin]
        while sizes[-1] * factor <= end and len(sizes) <= MAX_RANGE_SIZES:
            sizes.append(sizes[-1] * factor)
    elif step[:1] == "+":
        increment = read_size(step[1:])
        if (end - begin) // increment + 1 > MAX_RANGE_SIZES:
            raise BadInput(f"{flag}: {shown(text)} is more than {MAX_RANGE_SIZES} sizes")
        sizes = list(range(begin, end + 1, increment))
    else:
        raise BadInput(f"{flag}: {shown(step)} is not a step: xFACTOR (x2, x4) or +SIZE (+1M)")
    if len(sizes) > MAX_RANGE_SIZES:
        raise BadInput(f"{flag}: {shown(text)} is more than {MAX_RANGE_SIZES} sizes")
    return sizes
