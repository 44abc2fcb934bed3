"""The gang agrees before it measures: the options every rank must share, as text, and their comparison.

Ranks started with different values of an option the probes depend on (a job script edited on
one node, a stale pod template) crash or hang the collectives: gloo aborts rank 0 on a message
of another size, groups of another mesh never form. So every rank sends `agreed_values(options)`
(the table's `agree` column, each value as text by flag, parsed: `64K` and `65536` are the same
value) and its stamp with its payload, and rank 0 compares them after the collect, before any
collective (`disagreements`); a difference is RUN011, no-go, and every rank exits 3.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from preflight.lib.mesh_shape import MeshDim, mesh_text
from preflight.model.agreement import RankStamp
from preflight.options.run import RunOptions
from preflight.options.table import AGREEING, Option

_BINARY = (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10))


def _size(value: int) -> str:
    """65536 -> 64K: a size as --sizes spells it (binary), bytes when no unit divides it."""
    return next((f"{value // scale}{unit}" for unit, scale in _BINARY if value and value % scale == 0), str(value))


def _text(name: str, value: Any) -> str:
    """One field's value as the comparison and the message show it."""
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "on" if value else "off"
    if name == "clock_skew_s":
        return f"clock_skew={value:g}s"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ",".join(f"{key}={_text(key, item)}" for key, item in sorted(value.items()))
    if isinstance(value, list) and value and isinstance(value[0], MeshDim):
        return mesh_text(value)
    if isinstance(value, list):
        return ",".join(_size(item) if name == "sizes" else str(item) for item in value)
    if isinstance(value, int) and name in ("checkpoint_size", "budget"):
        return _size(value)
    return str(value)


def _field(options: RunOptions, dotted: str) -> Any:
    """`storage.path` -> options.storage.path (None when the storage family is off)."""
    value: Any = options
    for part in dotted.split("."):
        value = getattr(value, part, None) if value is not None else None
    return value


def option_text(options: RunOptions, option: Option) -> str:
    """One agreeing option's value on this rank, as text (the parts it sets, joined by `;`)."""
    names = (option.target,) if option.target else option.sets
    parts = [_text(name.rpartition(".")[2], _field(options, name)) for name in names]
    kept = [part for part in parts if part not in ("", "default")] if len(parts) > 1 else parts
    return "; ".join(kept) or ("default" if len(parts) > 1 else "")


def agreed_values(options: RunOptions) -> dict[str, str]:
    """Every option the ranks must agree on, by flag, as this rank was started with it."""
    return {option.flag: option_text(options, option) for option in AGREEING}


RankView = tuple[RankStamp, Mapping[str, str] | None]  # a rank's stamp and agreeing values (None: unreadable)


RankView = tuple[RankStamp, Mapping[str, str] | None]  # a rank's stamp and agreeing values (None: unreadable)


def disagreements(by_rank: Mapping[int, RankView]) -> list[tuple[str, dict[str, list[int]]]]:
    """Each compared name (a flag, `preflight version`, `wire version`) whose value is not the same on
    every rank: (name, {value: ranks}), in the table's order.

    `by_rank`: each rank's stamp and agreeing values (None: a payload that did not decode, whose
    stamp alone is compared). Ranks that sent the same values share one dict (the payload's shared
    part is decoded once per distinct value), so the work is one pass over the ranks and one per
    distinct dict, whatever the world size."""
    groups: dict[tuple[RankStamp, int], tuple[Mapping[str, str] | None, list[int]]] = {}
    for rank in sorted(by_rank):
        stamp, values = by_rank[rank]
        groups.setdefault((stamp, id(values)), (values, []))[1].append(rank)
    if len(groups) < 2:
        return []
    views = [({**stamp.as_values(), **(values or {})}, ranks) for (stamp, _), (values, ranks) in groups.items()]
    names = list(dict.fromkeys(name for view, _ in views for name in view))
    found = []
    for name in names:
        by_value: dict[str, list[int]] = {}
        for view, ranks in views:
            if name in view:  # a payload that did not decode has its stamp only
                by_value.setdefault(view[name], []).extend(ranks)
        if len(by_value) > 1:
            found.append((name, {value: sorted(ranks) for value, ranks in by_value.items()}))
    return found

