"""The one rule for shortening text a person reads: words go, numbers and units never.

A headline cut at a character count read `busbw 0.983 GB/s is 1% of the expected 10…` for an
expected 100 GB/s. Here text is shortened by whole words only: first whole trailing clauses (a
parenthesis, what follows a `;`), as few as need go and never one that leaves less than half the
room; then the words after its last number, then
other words from the right (each run of dropped words one `…`); a number and the unit after it
stay whole. Only when the numbers alone do not fit does a whole number go (with
its unit), from the right; a single word longer than the room is the one thing cut inside.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"
# Units a number is written with in preflight's messages (a trailing `,;:)` is allowed).
UNITS = frozenset({
    "B", "KiB", "MiB", "GiB", "TiB", "PiB", "kB", "MB", "GB", "TB", "PB",
    "B/s", "KiB/s", "MiB/s", "GiB/s", "kB/s", "MB/s", "GB/s", "TB/s", "Gb/s", "Mb/s",
    "TFLOP/s", "GFLOP/s", "TFLOPS", "s", "ms", "us", "µs", "ns", "min", "h", "%", "x",
    "W", "C", "°C", "MHz", "GHz", "bytes", "inodes", "files", "ranks", "rank(s)", "hosts", "host(s)",
    "errors", "error", "iterations", "checkpoints",
})
_HAS_DIGIT = re.compile(r"\d")


def shorten(text: str, limit: int) -> str:
    """`text` in at most `limit` characters (see the module's rule); unchanged when it fits."""
    if len(text) <= limit:
        return text
    words = text.split(" ")
    # 0. whole trailing clauses first (a parenthesis, or what follows a `;`), as few as need go: what
    # remains reads as a sentence, not as numbers between ellipses
    for start in _clause_starts(words)[::-1]:
        shorter = [*words[:start], ELLIPSIS]
        if len(" ".join(shorter)) < limit // 2:
            break  # that clause is the sentence itself: words go from here on, not it
        words = shorter
        if len(" ".join(words)) <= limit:
            return " ".join(words)
    kept = [True] * len(words)
    numbers = _numbers(words)
    last_number = max((i for i, n in enumerate(numbers) if n), default=-1)
    # 1. the tail after the last number, 2. other words from the right, 3. whole numbers (with their
    # units) from the right; each step drops one group of words
    order = ([[i] for i in range(len(words) - 1, last_number, -1)]
             + [[i] for i in range(last_number, 0, -1) if not numbers[i]]
             + _figures(words, numbers)[::-1])
    for group in order:
        if len(_join(words, kept)) <= limit:
            break
        for index in group:
            kept[index] = False
    shown = _join(words, kept)
    if len(shown) <= limit:
        return shown
    return shown[: max(0, limit - 1)] + ELLIPSIS  # one word longer than the room: nothing else to drop


def _clause_starts(words: list[str]) -> list[int]:
    """Where a trailing clause starts: a word opening a parenthesis, or the word after one ending in `;`
    (never the first word)."""
    return [i for i in range(1, len(words)) if words[i].startswith("(") or words[i - 1].endswith(";")]


def _numbers(words: list[str]) -> list[bool]:
    """Per word: it is a number, or the unit right after one (both stay as long as anything can)."""
    flags = [bool(_HAS_DIGIT.search(word)) for word in words]
    for i in range(1, len(words)):
        if flags[i - 1] and _HAS_DIGIT.search(words[i - 1]) and words[i].rstrip(",;:.)") in UNITS:
            flags[i] = True
    return flags


def _figures(words: list[str], numbers: list[bool]) -> list[list[int]]:
    """The indexes of each number with the units after it, left to right (the first word never goes)."""
    groups: list[list[int]] = []
    for i in range(1, len(words)):
        if not numbers[i]:
            continue
        if groups and groups[-1][-1] == i - 1 and not _HAS_DIGIT.search(words[i]):
            groups[-1].append(i)  # a unit joins its number
        else:
            groups.append([i])
    return groups


def _join(words: list[str], kept: list[bool]) -> str:
    """The kept words, each run of dropped ones a single `…`."""
    out: list[str] = []
    for word, keep in zip(words, kept):
        if keep:
            out.append(word)
        elif not out or out[-1] != ELLIPSIS:
            out.append(ELLIPSIS)
    return " ".join(out)
