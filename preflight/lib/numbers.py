"""Strict, bounded number parsing for every input: env variables, flags, hostlists, mesh strings.

`str.isdigit` accepts `²` and `٣`, which `int` refuses or reads as another digit; a 4,301-digit
string trips Python's int-string limit (ValueError) and `float('7' * 400)` is inf, which
`int()` refuses (OverflowError). Every parser here accepts only ASCII digits, a bounded number
of them, and a bounded value, and raises BadInput (one line, exit 2) for anything else.
"""

from __future__ import annotations

import re

from preflight.lib.errors import BadInput

MAX_DIGITS = 18  # any count, rank, port, size or job number fits; far below the int-string limit
_INT = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}")
_DECIMAL = re.compile(rf"(?:[0-9]{{1,{MAX_DIGITS}}}(?:\.[0-9]{{0,9}})?|\.[0-9]{{1,9}})")


def shown(value: str, limit: int = 40) -> str:
    """repr() of a value for an error message, cut so a huge value never reaches the output."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def json_number(value: object) -> float | None:
    """A number as JSON holds it (an int or a float, never a bool), as a float; None for anything else.

    For reading a finding's free-form `data` back (a report reloaded from disk may hold anything)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def json_numbers(value: object) -> list[float]:
    """The numbers of a JSON list (others skipped); [] when it is not a list."""
    return [n for n in map(json_number, value) if n is not None] if isinstance(value, list) else []


def is_ascii_int(text: str) -> bool:
    """True for 1 to MAX_DIGITS ASCII digits and nothing else (no sign, space, `²`, `٣` or `_`)."""
    return _INT.fullmatch(text) is not None


def ascii_int(text: str, what: str, *, minimum: int | None = 0, maximum: int | None = None) -> int:
    """The integer `text` spells in ASCII digits (surrounding spaces allowed); BadInput otherwise.

    A leading `-` is read (and then refused by `minimum` where it must be).
    """
    body = text.strip()
    negative = body.startswith("-")
    digits = body[1:] if negative else body
    if not is_ascii_int(digits):
        raise BadInput(f"{what}={shown(text)} is not an integer")
    number = -int(digits) if negative else int(digits)
    if minimum is not None and number < minimum:
        raise BadInput(f"{what}={shown(text)} must be >= {minimum}")
    if maximum is not None and number > maximum:
        raise BadInput(f"{what}={shown(text)} must be <= {maximum}")
    return number


def ascii_decimal(text: str, what: str, *, maximum: float | None = None) -> float:
    """A non-negative decimal number in ASCII (`12`, `0.5`, `.5`; no exponent, inf or nan); BadInput otherwise."""
    body = text.strip()
    if _DECIMAL.fullmatch(body) is None:
        raise BadInput(f"{what}: {shown(text)} is not a number")
    value = float(body)
    if maximum is not None and value > maximum:
        raise BadInput(f"{what}: {shown(text)} is above the maximum {maximum:g}")
    return value
