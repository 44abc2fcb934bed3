"""Slurm hostlists and rank ranges, in our own Python: `gpu[001-004,010],login1` <-> names, `0-3,7` <- ranks.

Expansion follows Slurm's rules: top-level commas separate entries, each bracket holds
comma-separated numbers or ranges, zero-padding is kept, and several brackets in one
entry multiply (`r[1-2]n[1-2]`). We never call scontrol: it may not be on the node.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from preflight.lib.errors import BadInput

_MAX_HOSTS = 1_000_000


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise BadInput(f"hostlist {text!r}: nested '['")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise BadInput(f"hostlist {text!r}: ']' without '['")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise BadInput(f"hostlist {text!r}: unclosed '['")
    parts.append("".join(current))
    return parts


def _expand_range_list(body: str, whole: str) -> list[str]:
    """`001-004,010` -> ['001', '002', '003', '004', '010']."""
    values: list[str] = []
    for item in body.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", item.strip())
        if not match:
            raise BadInput(f"hostlist {whole!r}: {item!r} is not a number or range")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        low, high = int(low_text), int(high_text)
        if high < low:
            raise BadInput(f"hostlist {whole!r}: range {item!r} runs backwards")
        if high - low > _MAX_HOSTS:
            raise BadInput(f"hostlist {whole!r}: range {item!r} is too large")
        width = len(low_text) if low_text.startswith("0") else 0
        values.extend(str(n).zfill(width) for n in range(low, high + 1))
    return values


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names, in order. Raises BadInput."""
    text = text.strip()
    if not text:
        return []
    hosts: list[str] = []
    for entry in _split_top_level(text):
        entry = entry.strip()
        if not entry:
            raise BadInput(f"hostlist {text!r}: empty entry")
        pieces = re.split(r"(\[[^\]]*\])", entry)
        choices = [
            _expand_range_list(piece[1:-1], text) if piece.startswith("[") else [piece]
            for piece in pieces
            if piece
        ]
        hosts.extend("".join(combo) for combo in itertools.product(*choices))
        if len(hosts) > _MAX_HOSTS:
            raise BadInput(f"hostlist {text!r} expands to more than {_MAX_HOSTS} hosts")
    return hosts


def compress_hostlist(hosts: Iterable[str]) -> str:
    """The shortest usual form: `gpu[001-004,010],login1`. Order: sorted, duplicates dropped."""
    groups: dict[tuple[str, int, str], list[int]] = {}
    plain: list[str] = []
    for host in sorted(set(hosts)):
        match = re.fullmatch(r"(.*?)(\d+)(\D*)", host)
        if not match:
            plain.append(host)
            continue
        prefix, digits, suffix = match.groups()
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
