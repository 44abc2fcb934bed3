"""A rank's copy of a section it shares with others: the shared object's fields, and its own.

Rank 0 rebuilds a World and a SystemLimits per rank from the one each host or job shares (the rank
table's unpack, the channel's decode of referenced sections), and joins each rank's health and placement
to its host's parts (model/host_parts.py): 131,072 copies at the largest scale,
so the copy is written for speed, and every field was validated when the shared one was decoded.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import msgspec

T = TypeVar("T", bound=msgspec.Struct)


def clone(shared: T, **own: object) -> T:
    """A copy of a shared section with this rank's own fields: the Struct's own copy (in C) and one assignment
    per own field, no __post_init__ re-run (every field was validated when the shared one was decoded).
    A frozen section cannot be assigned to: msgspec.structs.replace, which validates again."""
    copier = _copier(type(shared), tuple(own))
    return msgspec.structs.replace(shared, **own) if copier is None else copier(shared, **own)


@functools.cache
def _copier(cls: type, own: tuple[str, ...]) -> Any:
    """For a Struct type that is not frozen, a function that copies one with `own` fields replaced,
    the assignments written out (rank 0 clones a World per rank: a loop of setattr calls cost 10 us a
    rank, 1.3 s at 131,072 ranks). None for a frozen type, or names that are not identifiers."""
    if cls.__struct_config__.frozen or not all(name.isidentifier() for name in own):
        return None
    lines = [f"def copier(shared, {', '.join(own)}):" if own else "def copier(shared):", "    made = shared.__copy__()"]
    lines += [f"    made.{name} = {name}" for name in own]
    namespace: dict[str, Any] = {}
    exec("\n".join([*lines, "    return made"]), namespace)  # names checked as identifiers above
    return namespace["copier"]
