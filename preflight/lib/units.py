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


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, cut between words and ending in `…`; a number is
    never left without the unit after it (`0.0789 GB` stays whole or goes whole)."""
    if len(text) <= limit:
        return text
    words = text.split(" ")
    kept: list[str] = []
    for word in words:
        if len(" ".join([*kept, word])) + 2 > limit:
            break
        kept.append(word)
    cut_next = words[len(kept)] if len(kept) < len(words) else ""
    while kept and cut_next[:1].isalpha() and _is_number(kept[-1]):  # its unit was cut: drop the number too
        cut_next = kept.pop()
    return " ".join(kept).rstrip(",;:") + " …" if kept else text[: max(0, limit - 2)] + " …"


def _is_number(word: str) -> bool:
    try:
        float(word.rstrip(",;:").replace("x", ""))
    except ValueError:
        return False
    return True
