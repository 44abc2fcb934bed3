"""A rank's environment as rank 0 holds it: the variables most ranks share, once, and its own.

(Its World's launcher variables, `World.raw`, are held the same way: the ones not set per rank
once for the job, the per-rank ones its own.)

At 131,072 ranks a full dict per rank (~150 variables, 4.4 kB each) was ~600 MB of rank 0's
memory, and every pass over the job's environments (the report's rank table, ENV003's drift)
walked 20M items. Most ranks hold the same environment but for the few variables a launcher
sets per rank (RANK, SLURM_PROCID, ...): `RankEnv` keeps that common part as one dict shared
by every such rank and only the rank's own variables beside it. It reads as the merged dict
(`{**shared, **own}`: a rank's own value wins) through the Mapping interface the checks use
(`get`, `[]`, `in`, `items()`), compares equal to that dict, and encodes as it (the codec's
hook). Read-only: the shared part belongs to many ranks.

The passes over many ranks look at `shared` and `own` directly (`shared_of`): the shared part is
compared once per distinct object, and per rank only its own few variables.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

_MISSING: Any = object()


class RankEnv(Mapping[str, str]):
    """`{**shared, **own}`, without copying `shared` (see the module docstring)."""

    __slots__ = ("own", "shared")

    def __init__(self, shared: dict[str, str], own: dict[str, str]) -> None:
        self.shared = shared  # read-only: the same dict for every rank that sent it
        self.own = own

    def __getitem__(self, name: str) -> str:
        value = self.own.get(name, _MISSING)
        return self.shared[name] if value is _MISSING else value

    def get(self, name: str, default: Any = None) -> Any:
        value = self.own.get(name, _MISSING)
        return self.shared.get(name, default) if value is _MISSING else value

    def __contains__(self, name: object) -> bool:
        return name in self.own or name in self.shared

    def __iter__(self) -> Iterator[str]:
        own = self.own
        yield from (name for name in self.shared if name not in own)
        yield from own

    def __len__(self) -> int:
        return len(self.shared) + sum(1 for name in self.own if name not in self.shared)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(other.get(name, _MISSING) == value for name, value in self.items())

    __hash__ = None  # type: ignore[assignment]  # a mapping, as dict: unhashable

    def __repr__(self) -> str:
        return f"RankEnv({dict(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return RankEnv, (self.shared, self.own)


def shared_of(env: Mapping[str, str]) -> tuple[dict[str, str] | None, Mapping[str, str]]:
    """(the part other ranks may share, this rank's own part) of an environment; a plain mapping is
    all its own (None shared)."""
    if isinstance(env, RankEnv):
        return env.shared, env.own
    return None, env
