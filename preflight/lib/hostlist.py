"""Slurm hostlists and rank ranges, in our own Python: `gpu[001-004,010],login1` <-> names, `0-3,7` <- ranks.

Expansion follows Slurm's rules: top-level commas separate entries, each bracket holds
comma-separated numbers or ranges, zero-padding is kept, and several brackets in one
entry multiply (`r[1-2]n[1-2]`). We never call scontrol: it may not be on the node.

Bounded before expanded: the host count of the whole expression is computed from the ranges
first, and an expression of more than MAX_HOSTS hosts (or longer than MAX_HOSTLIST_CHARS, or
with a number of more than MAX_DIGITS ASCII digits) is BadInput before any name is built, so
`r[0-999999]n[0-999999]` is refused at once instead of filling memory.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from preflight.lib.errors import BadInput
from preflight.lib.numbers import MAX_DIGITS, shown

MAX_HOSTS = 100_000  # far above any Slurm cluster's node count; more is a broken or hostile value
MAX_HOSTLIST_CHARS = 1_000_000
_RANGE = re.compile(rf"([0-9]{{1,{MAX_DIGITS}}})(?:-([0-9]{{1,{MAX_DIGITS}}}))?")
_DIGITS = frozenset("0123456789")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise BadInput(f"hostlist {shown(text)}: nested '['")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise BadInput(f"hostlist {shown(text)}: ']' without '['")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise BadInput(f"hostlist {shown(text)}: unclosed '['")
    parts.append("".join(current))
    return parts


def _parse_range_list(body: str, whole: str) -> list[tuple[int, int, int]]:
    """`001-004,010` -> [(1, 4, 3), (10, 10, 3)]: (low, high, zero-padded width), nothing expanded."""
    ranges: list[tuple[int, int, int]] = []
    for item in body.split(","):
        match = _RANGE.fullmatch(item.strip())
        if not match:
            raise BadInput(f"hostlist {shown(whole)}: {shown(item)} is not a number or range")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        low, high = int(low_text), int(high_text)
        if high < low:
            raise BadInput(f"hostlist {shown(whole)}: range {shown(item)} runs backwards")
        width = len(low_text) if low_text.startswith("0") else 0
        ranges.append((low, high, width))
    return ranges


def _count(choices: list[list[tuple[int, int, int]] | str]) -> int:
    """How many names one entry expands to (the product of its bracket sizes), without expanding."""
    total = 1
    for choice in choices:
        if not isinstance(choice, str):
            total *= sum(high - low + 1 for low, high, _ in choice)
            if total > MAX_HOSTS:  # stop multiplying early: the product of huge ranges stays small work
                return total
    return total


def _values(choice: list[tuple[int, int, int]] | str) -> list[str]:
    if isinstance(choice, str):
        return [choice]
    return [str(n).zfill(width) for low, high, width in choice for n in range(low, high + 1)]


def count_hostlist(text: str) -> int:
    """How many host names `expand_hostlist(text)` gives, computed without building them (BadInput on a bad one)."""
    return sum(_count(choices) for choices in _parse(text))


def _parse(text: str) -> list[list[list[tuple[int, int, int]] | str]]:
    text = text.strip()
    if not text:
        return []
    if len(text) > MAX_HOSTLIST_CHARS:
        raise BadInput(f"hostlist {shown(text)} is longer than {MAX_HOSTLIST_CHARS} characters")
    entries: list[list[list[tuple[int, int, int]] | str]] = []
    for entry in _split_top_level(text):
        entry = entry.strip()
        if not entry:
            raise BadInput(f"hostlist {shown(text)}: empty entry")
        pieces = re.split(r"(\[[^\]]*\])", entry)
        entries.append([_parse_range_list(piece[1:-1], text) if piece.startswith("[") else piece
                        for piece in pieces if piece])
    return entries


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names, in order. Raises BadInput.

    The count comes first: more than MAX_HOSTS names is BadInput before any is built.
    """
    entries = _parse(text)
    total = 0
    for choices in entries:
        total += _count(choices)
        if total > MAX_HOSTS:
            raise BadInput(f"hostlist {shown(text.strip())} expands to more than {MAX_HOSTS} hosts")
    return ["".join(combo) for choices in entries for combo in itertools.product(*map(_values, choices))]


def _split_number(host: str) -> tuple[str, str, str] | None:
    """`gpu012-ib` -> ('gpu', '012', '-ib'): the last run of ASCII digits, in linear time; None without one."""
    end = len(host)
    while end and host[end - 1] not in _DIGITS:
        end -= 1
    start = end
    while start and host[start - 1] in _DIGITS:
        start -= 1
    if start == end or end - start > MAX_DIGITS:
        return None
    return host[:start], host[start:end], host[end:]


def compress_hostlist(hosts: Iterable[str]) -> str:
    """The shortest usual form: `gpu[001-004,010],login1`. Order: sorted, duplicates dropped."""
    groups: dict[tuple[str, int, str], list[int]] = {}
    plain: list[str] = []
    for host in sorted(set(hosts)):
        parts = _split_number(host)
        if parts is None:
            plain.append(host)
            continue
        prefix, digits, suffix = parts
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((prefix, width, suffix), []).append(int(digits))
    entries = list(plain)
    for (prefix, width, suffix), numbers in groups.items():
        numbers.sort()
        if len(numbers) == 1:
            entries.append(f"{prefix}{str(numbers[0]).zfill(width)}{suffix}")
            continue
        ranges = []
        for _, run in itertools.groupby(enumerate(numbers), key=lambda pair: pair[1] - pair[0]):
            run_numbers = [n for _, n in run]
            low, high = str(run_numbers[0]).zfill(width), str(run_numbers[-1]).zfill(width)
            ranges.append(low if low == high else f"{low}-{high}")
        entries.append(f"{prefix}[{','.join(ranges)}]{suffix}")
    return ",".join(sorted(entries))


def ranks_text(ranks: Iterable[int], limit: int = 12) -> str:
    """`rank 3` or `ranks 0-3,7`: the word agrees with the count."""
    numbers = sorted(set(ranks))
    return f"{'rank' if len(numbers) == 1 else 'ranks'} {rank_ranges(numbers, limit=limit)}"


def rank_list(ranks: Iterable[int]) -> str:
    """[5, 2] -> '5,2': every rank, in the order given (a message quoting the ranks it was handed)."""
    return ",".join(str(r) for r in ranks)


def rank_ranges(ranks: Iterable[int], limit: int = 12) -> str:
    """[0, 1, 2, 3, 7] -> '0-3,7' (long lists end with the total)."""
    numbers = sorted(set(ranks))
    parts = []
    for _, run in itertools.groupby(enumerate(numbers), key=lambda pair: pair[1] - pair[0]):
        values = [n for _, n in run]
        parts.append(str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}")
    text = ",".join(parts[:limit])
    return text + (f",... ({len(numbers)} ranks)" if len(parts) > limit else "")


def host_ranges(hosts: Iterable[str], limit: int = 40) -> str:
    """A compressed hostlist for messages, cut near `limit` characters and ended with the host count."""
    unique = sorted(set(hosts))
    text = compress_hostlist(unique)
    if len(text) <= limit:
        return text
    return f"{text[:limit].rsplit(',', 1)[0]},... ({len(unique)} hosts)"


UNKNOWN_HOST = "an unknown host"


def host_text(host: str) -> str:
    """A host as a message names it: `an unknown host` in words, never `?`, when nobody said which."""
    return host or UNKNOWN_HOST
