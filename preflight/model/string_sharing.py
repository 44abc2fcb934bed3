"""Equal strings of decoded model values made one object: what rank 0 holds of every rank's own parts.

msgspec makes a new str for every string it decodes. On GPU hosts each rank sends its own health and
placement (its bound GPU, its CPUs, its NICs), which rank 0 decodes once per distinct value
(`SharedSections.own_part`, channel/sections.py): at 131,072 ranks, 131,072 of each, ~30 strings apiece that
nearly every rank repeats ("mlx5_0/1", "LOCAL_RANK", a PCI bus id of the host's eight, the VBIOS):
~1.8 KB of each rank's ~3.9 KB of decoded own parts. `share_strings` replaces each by the equal string
seen before, in place, with a function generated once per model type that touches only the fields whose
declared type holds strings (a walk over every field of every value cost several times more).
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from preflight.model.codec import field_names, is_frozen, is_model_type, type_hints

T = TypeVar("T")


def share_strings(value: T, seen: dict[str, str]) -> T:
    """`value` (a model object as decoded) with each string of its fields, lists and string maps,
    at any depth, replaced by the equal one in `seen` (added there when new); returned for chaining."""
    _sharer(type(value))(value, seen)
    return value


def _ignore(value: Any, seen: dict[str, str]) -> None:
    """The sharer of a type that holds no strings a sharer may replace (or whose fields cannot be set)."""


@functools.cache
def _sharer(cls: type) -> Callable[[Any, dict[str, str]], None]:
    """The generated sharer of a model type (see the module docstring)."""
    hints = type_hints(cls) if is_model_type(cls) else None
    if hints is None or is_frozen(cls):
        return _ignore
    lines, names = [], {}
    for name in field_names(cls):
        kind, inner = _kind(hints.get(name, Any))
        get = f"v = o.{name}"
        if kind == "str":
            lines += [get, f"if v: o.{name} = sd(v, v)"]
        elif kind == "str or a number":
            lines += [get, f"if v.__class__ is str: o.{name} = sd(v, v)"]
        elif kind == "list[str]":
            lines += [get, f"if v: o.{name} = [sd(x, x) for x in v]"]
        elif kind == "dict[str, str]":
            lines += [get, f"if v: o.{name} = {{sd(k, k): sd(x, x) for k, x in v.items()}}"]
        elif kind == "dict[str, a number]":
            lines += [get, f"if v: o.{name} = {{sd(k, k): x for k, x in v.items()}}"]
        elif kind in ("model", "list[model]") and inner is not cls:
            nested = _sharer(inner)
            if nested is _ignore:
                continue
            names[f"_{len(names)}"] = nested
            call = f"_{len(names) - 1}"
            lines += [get, f"if v is not None: {call}(v, s)" if kind == "model" else f"for x in v or (): {call}(x, s)"]
    if not lines:
        return _ignore
    source = "def share(o, s):\n    sd = s.setdefault\n" + "".join(f"    {line}\n" for line in lines)
    namespace: dict[str, Any] = dict(names)
    exec(compile(source, f"<string sharer of {cls.__qualname__}>", "exec"), namespace)
    return namespace["share"]


def _kind(hint: Any) -> tuple[str, Any]:
    """What a field's declared type holds, as far as strings go: ("str" | "str or a number" | "list[str]" |
    "dict[str, str]" | "dict[str, a number]" | "model" | "list[model]" | "", the model type). A type that
    holds strings otherwise is not one of the own parts' (tests/model/test_string_sharing.py walks them)."""
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):  # X | None: what X holds (a field is None or an X)
        if len(args) == 1:
            return _kind(args[0])
        return ("str or a number", None) if str in args and set(args) <= {str, *_NUMBERS} else ("", None)
    if hint is str:
        return "str", None
    if is_model_type(hint):
        return "model", hint
    if origin is list and len(args) == 1:
        if args[0] is str:
            return "list[str]", None
        if is_model_type(args[0]):
            return "list[model]", args[0]
    if origin is dict and args == [str, str]:
        return "dict[str, str]", None
    if origin is dict and len(args) == 2 and args[0] is str and args[1] in _NUMBERS:
        return "dict[str, a number]", None
    return "", None


_NUMBERS = (int, float, bool)
