"""Byte counts as people read them: 1048576 -> `1 MiB` (message sizes are powers of two)."""

from __future__ import annotations


def human_bytes(size: int) -> str:
    """1048576 -> '1 MiB', 1536 -> '1.5 KiB', 512 -> '512 B'."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:g} {unit}"
        value /= 1024
    return f"{size} B"
