"""The one JSON codec for every model type: reports on disk and payloads between ranks.

msgspec encodes Structs (and dataclasses) directly and decodes them with type validation, so a payload or a
report that does not match the model (a host given as a dict, an env value that is a list)
raises `BadPayload` here, at the one boundary where data enters, and never a TypeError deep
inside a check or a renderer.

Bounded: input above `max_bytes` (default MAX_DECODE_BYTES) is refused before it is parsed,
JSON nested deeper than Python's recursion allows is refused by msgspec, and a decoded value
whose free-form parts (a finding's `data`) nest deeper than MAX_DEPTH is refused too, so no
renderer or check ever recurses into a hostile structure.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

def _enc_hook(value: Any) -> Any:
    """A read-only mapping in the model (a RankEnv, model/rank_env.py) encodes as the dict it reads as; a
    read-only sequence (a loaded report's ranks, model/table_ranks.py) as the list."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)
MAX_DECODE_BYTES = 256 * 2**20  # a report of thousands of ranks fits; callers may pass less (a rank's payload)
MAX_DEPTH = 64  # containers within containers, model objects included; the model itself is under 10


class BadPayload(ValueError):
    """Data that does not decode into the model type it claims to be."""


def encode(value: Any) -> bytes:
    """JSON bytes of a model object (Structs, dataclasses, enums, lists and dicts of them).

    A string that is not valid Unicode (os.environ, sys.argv and file names hold bytes that are not
    UTF-8 as lone surrogates, Python's surrogateescape) is written with those bytes escaped, `\\xff`:
    the same bytes give the same text on every rank, and a rank never fails to publish for it.
    """
    try:
        return _ENCODER.encode(value)
    except UnicodeEncodeError:
        return _ENCODER.encode(_valid_unicode(msgspec.to_builtins(value, enc_hook=_enc_hook)))


def valid_text(text: str) -> str:
    """`text` as it crosses the wire: itself, or where the OS gave bytes that are not UTF-8 (lone
    surrogates, Python's surrogateescape), those bytes escaped (`\\xff`). Where facts enter (the
    environment, the launcher's variables), so that a rank's own facts read as the others' do."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")  # the bytes the OS gave
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "backslashreplace")  # other lone surrogates: \udXXX
        return raw.decode("utf-8", "backslashreplace")


def _valid_unicode(value: Any) -> Any:
    """`value` (builtins) with every string, keys included, made encodable (see `encode`)."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return {_valid_unicode(k): _valid_unicode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_unicode(v) for v in value]
    return value


def decode(data: bytes | str, into: type[T], max_bytes: int = MAX_DECODE_BYTES) -> T:
    """Parse JSON into a model type, validating every field's type; BadPayload when it does not fit.

    BadPayload too for input longer than max_bytes, or nested deeper than MAX_DEPTH.
    """
    if not isinstance(data, (bytes, bytearray, memoryview, str)):
        raise BadPayload(f"expected JSON bytes or text, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise BadPayload(f"{len(data)} bytes is more than the maximum {max_bytes}")
    # The cyclic collector paused: decoding allocates only new, acyclic objects, and each automatic
    # collection would rescan every one decoded so far (a 131,072-rank report: 311k network
    # objects took 2.0 s to decode with it running, 0.26 s paused). Reference counting still frees.
    try:
        decoder, nests = _decoder(into)
    except TypeError:  # an unhashable annotation: decoded and walked as before
        decoder, nests = msgspec.json.Decoder(into, strict=False), True
    enabled = gc.isenabled()
    if enabled:  # (a caller decoding many, channel/collected.accept_many, paused it already)
        gc.disable()
    try:
        value = decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeError) as exc:
        raise BadPayload(str(exc)[:300]) from None
    finally:
        if enabled:
            gc.enable()
    if nests:
        _check_depth(value)
    return value


@functools.cache
def _decoder(into: Any) -> tuple[msgspec.json.Decoder, bool]:
    """A type's decoder, made once (rank 0 decodes 131,072 payloads: the module-level decode looks
    the type up on every call), and whether its values can nest free-form data (_can_nest)."""
    return msgspec.json.Decoder(into, strict=False), _can_nest(into)


@functools.cache
def _can_nest(into: Any) -> bool:
    """Whether a value of this declared type can hold free-form (`Any`) data at all: the depth walk
    is skipped for one that cannot (a typed section, as deep as the model; see _check_depth)."""
    return _may_nest(into, set())


def _check_depth(value: Any) -> None:
    """BadPayload when containers nest deeper than MAX_DEPTH (iterative: never recurses itself).

    Only the parts that can nest at all are walked: msgspec has validated the value against
    its type, so a field typed without `Any` (a `list[str]`, a `list[Interface]`) is as deep as
    the model, far under MAX_DEPTH. Walking every field of 4,096 payloads cost 1.5 s of rank
    0's 2.3 s collect (issue 16); the free-form parts (a finding's `data`) are a few objects."""
    names = _model_nesting(type(value))
    if names is not None:
        for name in names:
            if getattr(value, name, None):
                break
        else:
            return  # nothing free-form in it at all (a payload without findings): the common case
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (str, bytes, int, float, bool)) or item is None:
            continue
        if depth > MAX_DEPTH:
            raise BadPayload(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend((child, depth + 1) for child in item)
        elif is_model_type(type(item)):
            stack.extend((getattr(item, name, None), depth + 1) for name in _nesting_fields(type(item)))


@functools.cache
def _model_nesting(cls: type) -> tuple[str, ...] | None:
    """_nesting_fields of a model type; None for any other type."""
    return _nesting_fields(cls) if is_model_type(cls) else None


@functools.cache
def _nesting_fields(cls: type) -> tuple[str, ...]:
    """The fields of a model type whose declared type can hold free-form (`Any`) data, at any depth."""
    names = field_names(cls)
    hints = type_hints(cls)
    if hints is None:  # a type that cannot be resolved: walk every field, as before
        return names
    return tuple(name for name in names if _may_nest(hints.get(name, Any), {cls}))


def _may_nest(tp: Any, seen: set[type]) -> bool:
    if tp is Any or tp is object:
        return True
    if is_model_type(tp):
        return tp not in seen and any(_may_nest(hint, seen | {tp}) for hint in _hints(tp))
    return any(_may_nest(arg, seen) for arg in typing.get_args(tp))


def is_model_type(tp: Any) -> bool:
    """Whether `tp` is a model type: a msgspec Struct, or one of the few dataclasses that hold a stage's state."""
    return isinstance(tp, type) and (issubclass(tp, msgspec.Struct) or dataclasses.is_dataclass(tp))


def field_names(cls: type) -> tuple[str, ...]:
    """A model type's field names, in order."""
    if issubclass(cls, msgspec.Struct):
        return cls.__struct_fields__
    return tuple(f.name for f in dataclasses.fields(cls))


def is_frozen(cls: type) -> bool:
    """Whether a model type's fields cannot be set after it is made."""
    if issubclass(cls, msgspec.Struct):
        return bool(cls.__struct_config__.frozen)
    return bool(cls.__dataclass_params__.frozen)  # type: ignore[attr-defined]


def _hints(cls: type) -> list[Any]:
    hints = type_hints(cls)
    return [Any] if hints is None else list(hints.values())


@functools.cache
def type_hints(cls: type) -> dict[str, Any] | None:
    """A class's resolved annotations, read once per class (None where they cannot be resolved): _may_nest
    reaches a nested model type on every path to it (a follower's first decode of the verdict read ~30
    classes' hints 78 times, ~0.05 CPU-s profiled)."""
    try:
        return typing.get_type_hints(cls)
    except Exception:
        return None


def to_builtins(value: Any) -> Any:
    """Plain dicts/lists/strings of a model object: what `json.dumps` would write for it."""
    return msgspec.to_builtins(value, str_keys=True, enc_hook=_enc_hook)


def from_builtins(raw: Any, into: type[T]) -> T:
    """Inverse of to_builtins, with the same validation as decode."""
    try:
        value = msgspec.convert(raw, type=into, strict=False)
    except (msgspec.ValidationError, RecursionError) as exc:
        raise BadPayload(str(exc)[:300]) from None
    _check_depth(value)
    return value
