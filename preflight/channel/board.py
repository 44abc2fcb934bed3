"""The one typed access to a run's store: every value a model type through the one codec.

A value is written with `write_value` (codec.encode) and read with `read_value` / `decode_value`
(codec.decode, bounded in size and depth): a value that is absent is None, and
one that does not decode into its type is a `BadValue` naming the rank it came from, which the
caller reports (RUN002-style) or ignores, never an exception. `fetch_raw` is the one chunked
multi_get (FETCH_CHUNK keys per call: one call of 65,536 keys resets the connection; 1,024 is
as fast).

`Board` is the typed face, bound to one store: it takes a row's key (channel/keys.py) and
reads or writes the row's type, never a string and a type apart. Outside preflight/channel/
nothing calls a store's methods itself (tests/test_architecture.py); the functions above are
the channel's own primitives (liveness.py's rank lists and counters).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from msgspec import Struct

from preflight.channel.keys import Agreed, Counter, Family, Key, RankList, Wire
from preflight.lib.waiting import wait_until
from preflight.model.codec import BadPayload, decode, encode

T = TypeVar("T")

FETCH_CHUNK = 1024  # keys per multi_get / multi_set
MAX_VALUE_BYTES = 8 * 2**20  # the largest message any rank sends besides its payload


class BadValue(Struct, frozen=True):
    """A value under `key` that did not decode into its message type: a bad value from rank `rank`."""

    key: str
    rank: int
    why: str

    def line(self) -> str:
        """One line for a finding: which rank (when one is known), which key, why."""
        writer = f" from rank {self.rank}" if self.rank >= 0 else ""
        return f"bad value{writer} under {str(self.key)!r}: {self.why}"


def write_value(store: Any, key: str, value: Any) -> None:
    """Publish a model value under `key`."""
    store.set(key, encode(value))


def decode_value(raw: Any, into: type[T], key: str, rank: int, max_bytes: int = MAX_VALUE_BYTES) -> T | BadValue:
    """`raw` as `into`; a BadValue naming `rank` when it does not fit (never an exception)."""
    try:
        return decode(bytes(raw) if isinstance(raw, (bytearray, memoryview)) else raw, into, max_bytes)
    except BadPayload as exc:
        return BadValue(key, rank, str(exc)[:200])
    except Exception as exc:
        return BadValue(key, rank, f"{type(exc).__name__}: {str(exc)[:160]}")


def decode_interned(raws: Sequence[Any], family: Family[T], ranks: Sequence[int]) -> list[T | BadValue | None]:
    """Each rank's raw value under `family` (keyed by rank: `nccl/{rank}`) as its type (None where
    absent), decoded once per distinct bytes; a value that does not decode names its rank's key."""
    if not ranks:
        return []
    row = family.at(ranks[0])
    into, limit = _message(row).family.type, _limit(row)
    seen: dict[bytes, Any] = {}
    out: list[Any] = []
    for rank, raw in zip(ranks, raws, strict=True):
        if raw is None:
            out.append(None)
            continue
        data = bytes(raw)
        value = seen.get(data)
        if value is None:
            value = decode_value(data, into, family.at(rank), rank, limit)
            if not isinstance(value, BadValue):
                seen[data] = value
        out.append(value)
    return out


def read_value(store: Any, key: str, into: type[T], rank: int, max_bytes: int = MAX_VALUE_BYTES
               ) -> T | BadValue | None:
    """The value under `key` as `into`; None when absent, BadValue when it does not decode."""
    if not store.check([key]):
        return None
    return decode_value(store.get(key), into, key, rank, max_bytes)


def fetch_raw(store: Any, keys: Sequence[str], partial: bool = True) -> list[bytes | None]:
    """Every key's raw value (None where absent), FETCH_CHUNK keys per multi_get.

    Per chunk, one `check` (true only when every key is there) and then one `multi_get`: two
    store calls per 1,024 keys. A chunk with a key still missing is read key by key when
    `partial`, else skipped (all None: a poll that waits for whole chunks costs one call)."""
    out: list[bytes | None] = []
    for start in range(0, len(keys), FETCH_CHUNK):
        chunk = list(keys[start:start + FETCH_CHUNK])
        if store.check(chunk):  # all present: one call
            out += [bytes(v) for v in store.multi_get(chunk)]
        elif partial:
            out += [bytes(store.get(k)) if store.check([k]) else None for k in chunk]
        else:
            out += [None] * len(chunk)
    return out


def set_raw_many(store: Any, keys: Sequence[str], value: str) -> None:
    """Set every key to the same plain value, FETCH_CHUNK keys per multi_set."""
    for start in range(0, len(keys), FETCH_CHUNK):
        chunk = list(keys[start:start + FETCH_CHUNK])
        store.multi_set(chunk, [value] * len(chunk))


def put_absent(store: Any, values: dict[str, bytes]) -> None:
    """Set each key that the store does not hold yet (one `check` when it holds them all, as it
    does for most ranks of a host; else a `check` per key and one `multi_set` of the absent).

    Two writers may both find a key absent and both write it: each writes the same bytes (a key
    names its content, sections.store_form), so that costs bytes, never a wrong value."""
    if not values or store.check(list(values)):
        return
    absent = [key for key in values if not store.check([key])]
    if absent:
        store.multi_set(absent, [values[key] for key in absent])


def count(store: Any, key: str, by: int = 1) -> int:
    """Add `by` to the counter under `key` (0 reads it); its new value."""
    return int(store.add(key, by))


def present(store: Any, key: str) -> bool:
    """Whether `key` has a value."""
    return bool(store.check([key]))


class Board:
    """A store, as code outside the channel sees it: typed values under keys of channel/keys.py's table.

    Every method takes a `Key` (a row's key: `keys.RESULT.at(rank)`), never a string and a type:
    a value is written as, and read into, its row's type; a counter is only counted."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def put(self, key: Key[T], value: T) -> None:
        """Publish a value of the key's type under it."""
        write_value(self.store, _message(key), value)

    def read(self, key: Key[T], rank: int) -> T | BadValue | None:
        """The value under `key`; None when absent, BadValue naming `rank` when it does not decode."""
        return read_value(self.store, key, _message(key).family.type, rank, _limit(key))

    def wait(self, key: Key[T], rank: int, timeout_s: float,
             stop_if: Callable[[], bool] | None = None) -> T | BadValue | None:
        """Wait (bounded) for `key`, then read it; None when it did not come in time, or the store went
        away meanwhile (rank 0, its host, is gone: nothing more can come; the beat says so, liveness.py)."""
        try:
            if not wait_until(lambda: self.store.check([key]), timeout_s, stop_if=stop_if):
                return None
            return self.read(key, rank)
        except (RuntimeError, OSError):  # c10d's DistNetworkError / DistStoreError are RuntimeErrors
            return None

    def has(self, key: Key[Any]) -> bool:
        """Whether `key` has a value."""
        return present(self.store, _row(key))

    def has_all(self, keys: Sequence[Key[Any]]) -> bool:
        """Whether every one of `keys` has a value (one store call)."""
        return bool(self.store.check([_row(k) for k in keys]))

    def count(self, key: Key[int], by: int = 1) -> int:
        """Add `by` to the counter under `key` (0 reads it); its new value."""
        if _row(key).family.type is not Counter:
            raise TypeError(f"{key!r} is not a counter (channel/keys.py)")
        return count(self.store, key, by)

    def fetch(self, keys: Sequence[Key[T]], ranks: Sequence[int], partial: bool = True
              ) -> list[T | BadValue | None]:
        """Every key's value, chunked (see fetch_raw); None where absent, BadValue naming its rank."""
        if not keys:
            return []
        into, limit = _message(keys[0]).family.type, _limit(keys[0])
        return [None if raw is None else decode_value(raw, into, key, rank, limit)
                for key, rank, raw in zip(keys, ranks, fetch_raw(self.store, keys, partial), strict=True)]

    def fetch_interned(self, family: Family[T], ranks: Sequence[int]) -> list[T | BadValue | None]:
        """Every rank's value under `family` (keyed by rank), each distinct value decoded once: ranks
        that sent the same bytes get the same object (treat it as read-only). For values many ranks send
        alike (NCCL's account: a host's ranks, and every healthy host, say the same): at 131,072 ranks a
        few hundred decodes, not 131,072; the keys are fetched as plain text (Family.texts)."""
        if not ranks:
            return []
        return decode_interned(fetch_raw(self.store, family.texts(ranks)), family, ranks)

    def agree(self, key: Key[str], proposal: str) -> bytes:
        """First writer wins: the value under `key` after proposing `proposal` (set only when absent)."""
        if _row(key).family.type is not Agreed:
            raise TypeError(f"{key!r} is not agreed through the store (channel/keys.py)")
        return bytes(self.store.compare_set(key, "", proposal))

    def under(self, prefix: str) -> Board:
        """The same store under a further key prefix (torch's PrefixStore; keys.PROBE_PREFIX, SECOND_PREFIX)."""
        from torch.distributed import PrefixStore

        return Board(PrefixStore(prefix, self.store))


def _row(key: Any) -> Key[Any]:
    """`key` when it is a row's key; TypeError for a bare string (a key outside the table)."""
    if not isinstance(key, Key):
        raise TypeError(f"{key!r} is not a key of channel/keys.py's table")
    return key


def _message(key: Any) -> Key[Any]:
    """`key` when its row carries a message type (not a counter, rank list or agreed text)."""
    if _row(key).family.type in (Counter, RankList, Agreed, Wire):
        raise TypeError(f"{key!r} holds a {key.family.type.__name__}, not a message")
    return key


def _limit(key: Key[Any]) -> int:
    return key.family.max_bytes or MAX_VALUE_BYTES
