"""A rank's copy of a section it shares with others: the shared object's fields, and its own.

Rank 0 rebuilds a World and a SystemLimits per rank from the one each host or job shares (the rank
table's unpack, the channel's decode of referenced sections), and joins each rank's health and placement
to its host's parts (model/host_parts.py): 131,072 copies at the largest scale,
so the copy is written for speed, and every field was validated when the shared one was decoded.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

T = TypeVar("T")


def clone(shared: T, **own: object) -> T:
    """A copy of a shared section with this rank's own fields (dataclasses.replace, 3x faster: no
    __init__ re-run; every field was validated when the table was decoded)."""
    cls = type(shared)
    slots = _slots(cls)
    if slots and (copier := _slot_copier(cls, tuple(own))) is not None:
        return copier(shared, **own)
    copy = object.__new__(cls)
    if not slots:
        copy.__dict__.update(shared.__dict__)
        copy.__dict__.update(own)
        return copy
    for name in slots:  # a frozen section with slots: no __dict__ to copy, no plain assignment
        object.__setattr__(copy, name, own[name] if name in own else getattr(shared, name))
    return copy


@functools.cache
def _slot_copier(cls: type, own: tuple[str, ...]) -> Any:
    """For a class with slots (World, SystemLimits), a function that copies one with `own` fields
    replaced: one assignment per slot, written out (rank 0 clones a World per rank: a loop of
    setattr calls cost 10 us a rank, 1.3 s at 131,072 ranks). None for a frozen class."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is not None and params.frozen:
        return None
    slots = _slots(cls)
    if not all(name.isidentifier() for name in (*slots, *own)):
        return None
    lines = [f"def copy(shared, {', '.join(own)}):" if own else "def copy(shared):", "    made = new(cls)"]
    lines += [f"    made.{name} = {name if name in own else 'shared.' + name}" for name in slots]
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    exec("\n".join([*lines, "    return made"]), namespace)  # names checked as identifiers above
    return namespace["copy"]


@functools.cache
def _slots(cls: type) -> tuple[str, ...]:
    return tuple(getattr(cls, "__slots__", ()))
