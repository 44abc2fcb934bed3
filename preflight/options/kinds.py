"""The kinds of value an option takes: how its text is read (the CLI) and how a value is checked (both doors).

A row of the options table (options/table.py) names its kind; the kind owns the bounds and the
message: `timeout_s (--timeout) must be a number of seconds, not str` (BadOptionType, also a
TypeError for an API caller), `timeout_s (--timeout)=0: must be above 0 and at most 604800`
(BadInput). `read` turns the command line's text into the value (argparse's `type`); `check`
validates a value from either door and returns it in its one type (an int of seconds becomes a
float, a tuple of tags a list, a Path a str).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from msgspec import Struct

from preflight.lib.errors import BadInput, BadOptionType
from preflight.lib.numbers import shown
from preflight.options.values import MAX_COUNT, MAX_LIST_CHARS, MAX_RATIO, MAX_SECONDS, parse_count, parse_seconds


class Kind(Struct, frozen=True):
    """What values an option takes: `what` as the docs say it, `check(label, value)` for a value from
    either door, `read(text)` for the command line's text (None: the text is the value)."""

    what: str
    check: Callable[[str, Any], Any]
    read: Callable[[str], Any] | None = None
    choices: tuple[str, ...] = ()


def bounded_number(label: str, value: Any, maximum: float, what: str) -> float:
    """A number above 0 and at most `maximum` (never a bool, inf or nan), as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadOptionType(f"{label} must be {what}, not {type(value).__name__}")
    if not (math.isfinite(value) and 0 < value <= maximum):
        raise BadInput(f"{label}={value!r}: must be above 0 and at most {maximum:g}")
    return float(value)


def _seconds(label: str, value: Any) -> float:
    return bounded_number(label, value, MAX_SECONDS, "a number of seconds")


def _seconds_or_none(label: str, value: Any) -> float | None:
    return None if value is None else _seconds(label, value)


def _seconds_or_zero(label: str, value: Any) -> float:
    return 0.0 if value == 0 and not isinstance(value, bool) else _seconds(label, value)


def _ratio(label: str, value: Any) -> float:
    return bounded_number(label, value, MAX_RATIO, "a number")


def count(label: str, value: Any) -> int | None:
    """None (the plan's default) or a whole number 0..MAX_COUNT."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadOptionType(f"{label} must be a whole number or None, not {type(value).__name__}")
    if not 0 <= value <= MAX_COUNT:
        raise BadInput(f"{label}={value!r}: must be 0 to {MAX_COUNT}")
    return value


def _flag(label: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadOptionType(f"{label} must be True or False, not {type(value).__name__}")
    return value


def _names(label: str, value: Any) -> list[str]:
    """A list of strings from any sequence of them (never one string, which would be its letters)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not all(
            isinstance(item, str) for item in value):
        raise BadOptionType(f"{label} must be a list of strings, not {type(value).__name__}")
    if len(value) > MAX_LIST_CHARS:
        raise BadInput(f"{label}: {len(value)} entries, at most {MAX_LIST_CHARS}")
    return list(value)


def path(label: str, value: Any) -> str | None:
    """None or a path (str or os.PathLike), as a str."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise BadOptionType(f"{label} must be a path or None, not {type(value).__name__}")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise BadOptionType(f"{label} must be a text path, not bytes")
    return text


def _text(label: str, value: Any) -> str:
    """Text as the command line writes it (`sizes="1M,64M"`): RunOptions.build parses it."""
    if not isinstance(value, str):
        raise BadOptionType(f"{label} must be a string as on the command line (e.g. sizes=\"1M,64M\"), "
                            f"not {type(value).__name__}")
    return value


def _text_or_none(label: str, value: Any) -> str | None:
    return None if value is None else _text(label, value)


def _csv(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise ValueError(f"{text!r} has an empty entry")
    return items


def _non_negative_seconds(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0.0") else parse_seconds(text)


def _run_id(text: str) -> str:
    """At most 200 printable characters without spaces: it becomes store keys and a folder name."""
    if not 0 < len(text) <= 200 or not text.isprintable() or any(c.isspace() for c in text):
        raise BadInput(f"{text[:40]!r} is not a run id (1-200 printable characters, no spaces)")
    return text


def _run_id_or_none(label: str, value: Any) -> str | None:
    return None if value is None else _run_id(_text(label, value))


def choice(flag: str, choices: tuple[str, ...]) -> Kind:
    """One of `choices`, as written (`--backend 'mpi': one of auto, nccl, gloo`)."""
    def check(label: str, value: Any) -> str:
        if value not in choices:
            raise BadInput(f"{flag} {shown(str(value))}: one of {', '.join(choices)}")
        return str(value)
    return Kind(f"one of {', '.join(choices)}", check, choices=choices)


SECONDS = Kind("seconds, above 0, at most a week", _seconds, parse_seconds)
SECONDS_OR_NONE = Kind("seconds, above 0 (none: the default per device)", _seconds_or_none, parse_seconds)
SECONDS_OR_ZERO = Kind("seconds, 0 or more", _seconds_or_zero, _non_negative_seconds)
RATIO = Kind("a number, 0 < RATIO <= 1", _ratio, parse_seconds)
COUNT = Kind(f"a whole number 0..{MAX_COUNT} (none: the default per device)", count, parse_count)
FLAG = Kind("on or off", _flag)
NAMES = Kind("a comma list", _names, _csv)
PATH = Kind("a path", path)
TEXT = Kind("text, read by its own parser", _text)
TEXT_OR_NONE = Kind("text (none: the environment variable)", _text_or_none)
RUN_ID = Kind("1-200 printable characters, no spaces", _run_id_or_none, _run_id)
