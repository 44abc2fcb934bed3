"""The one JSON codec for every model type: reports on disk and payloads between ranks.

msgspec encodes dataclasses directly and decodes them with type validation, so a payload or a
report that does not match the model (a host given as a dict, an env value that is a list)
raises `BadPayload` here, at the one boundary where data enters, and never a TypeError deep
inside a check or a renderer.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

_ENCODER = msgspec.json.Encoder()


class BadPayload(ValueError):
    """Data that does not decode into the model type it claims to be."""


def encode(value: Any) -> bytes:
    """JSON bytes of a model object (dataclasses, enums, lists and dicts of them)."""
    return _ENCODER.encode(value)


def decode(data: bytes | str, into: type[T]) -> T:
    """Parse JSON into a model type, validating every field's type; BadPayload when it does not fit."""
    try:
        return msgspec.json.decode(data, type=into, strict=False)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise BadPayload(str(exc)[:300]) from None


def to_builtins(value: Any) -> Any:
    """Plain dicts/lists/strings of a model object: what `json.dumps` would write for it."""
    return msgspec.to_builtins(value, str_keys=True)


def from_builtins(raw: Any, into: type[T]) -> T:
    """Inverse of to_builtins, with the same validation as decode."""
    try:
        return msgspec.convert(raw, type=into, strict=False)
    except (msgspec.ValidationError, RecursionError) as exc:
        raise BadPayload(str(exc)[:300]) from None
