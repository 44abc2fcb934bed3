"""Shared hypothesis settings and strategies of the fuzz suite (tests/fuzz/)."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# No single case may take 2 s; the example counts keep the whole suite near a minute on 2 cores.
# PREFLIGHT_FUZZ_SCALE=10 runs ten times the cases (a nightly job, or a hunt after a change).
SCALE = max(1, int(os.environ.get("PREFLIGHT_FUZZ_SCALE", "1") or "1"))
FUZZ = settings(deadline=2000, max_examples=300 * SCALE, suppress_health_check=[HealthCheck.too_slow])
FUZZ_SLOW = settings(FUZZ, max_examples=150 * SCALE)
# The CLI target shares its stubs (a function-scoped fixture) across cases on purpose.
FUZZ_CLI = settings(FUZZ, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Digits of every kind int() and str.isdigit() disagree on, and ASCII look-alikes.
TRICKY = ["²", "٣", "\uff11", "\u07c0",  # superscript two, Arabic-Indic three, fullwidth one, NKo zero
          "_", "-", "+", " ", "\t", "\x00", "\u200b", "e", "E", "inf", "nan", "0x", "[", "]",
          ",", "(", ")", "x", ":", "*", ".", "/", "=", "'", '"', "\\", "\udcff"]
tricky_text = st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=6), st.from_regex(r"[0-9]{1,40}")),
                       max_size=12).map("".join)
huge_number = st.integers(min_value=0, max_value=4400).map(lambda n: "7" * n)
any_text = st.one_of(tricky_text, huge_number, st.text(max_size=60))

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                      st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
json_value = st.recursive(json_leaf, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)), max_leaves=12)


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) into a JSON document, the root excluded."""
    out: list[tuple] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, child in items:
        out.append((*prefix, key))
        out.extend(paths(child, (*prefix, key)))
    return out


def same_kind(value: Any) -> st.SearchStrategy:
    """A value of the same JSON type (what survives typed decoding and reaches the renderers)."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.one_of(st.integers(min_value=-(2**63), max_value=2**63), st.sampled_from([0, -1, 1, 2**31]))
    if isinstance(value, float):
        return st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0, -1.0, 1e308]))
    if isinstance(value, str):
        return st.one_of(st.text(max_size=30), st.sampled_from(["", "error", "warn", "ok", "<script>", "{{x}}"]))
    if isinstance(value, list):
        return st.one_of(st.just([]), st.just(value * 2), st.just(value[:1]))
    if isinstance(value, dict):
        return st.one_of(st.just({}), st.dictionaries(st.text(max_size=8), json_value, max_size=3))
    return json_value


@st.composite
def mutated(draw: st.DrawFn, doc: Any, max_mutations: int = 3) -> Any:
    """doc with 1 to max_mutations values replaced (same kind, or anything), deleted or deeply nested."""
    import copy

    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(min_value=1, max_value=max_mutations))):
        every = paths(doc)
        if not every:
            break
        path = draw(st.sampled_from(every))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        op = draw(st.sampled_from(["same", "same", "any", "delete", "deep"]))
        if op == "delete":
            del parent[key]
        elif op == "deep":
            parent[key] = f"__DEEP_{draw(st.integers(min_value=1, max_value=5000))}__"  # see to_bytes
        else:
            parent[key] = draw(same_kind(parent[key]) if op == "same" else json_value)
    return doc


def to_bytes(doc: Any) -> bytes:
    """JSON bytes of a mutated document, each `__DEEP_n__` marker written as n nested arrays."""
    import re

    import msgspec

    raw = msgspec.json.encode(doc)
    return re.sub(rb'"__DEEP_([0-9]+)__"', lambda m: b"[" * int(m.group(1)) + b"{}" + b"]" * int(m.group(1)), raw)
