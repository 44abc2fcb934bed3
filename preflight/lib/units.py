"""Numbers as people read them: byte counts (1048576 -> `1 MiB`), percentages, counts."""

from __future__ import annotations


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
    return f"{fraction * 100:.2g}%"


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
