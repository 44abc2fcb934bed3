"""NCCL's interface-name syntax (preflight/lib/ifname.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preflight.lib.ifname import match_gloo_interfaces, match_interfaces, parse_spec

NAMES = ["lo", "eth0", "eth01", "ib0", "ib1", "docker0", "enp1s0"]


@pytest.mark.parametrize(("spec", "expected"), [
    ("ib", ["ib0", "ib1"]),
    ("ib0", ["ib0"]),
    ("eth0", ["eth0", "eth01"]),  # a prefix
    ("=eth0", ["eth0"]),  # exact
    ("^lo,docker", ["eth0", "eth01", "ib0", "ib1", "enp1s0"]),
    ("^=eth0", ["lo", "eth01", "ib0", "ib1", "docker0", "enp1s0"]),
    ("ib0:5000,enp", ["ib0", "enp1s0"]),  # ports do not take part
    (" ib1 , eth01 ", ["eth01", "ib1"]),
    ("nosuch", []),
    ("=eth", []),
])
def test_match_interfaces(spec: str, expected: list[str]) -> None:
    assert match_interfaces(spec, NAMES) == [n for n in NAMES if n in expected]


def test_empty_entry_is_an_error() -> None:
    with pytest.raises(ValueError, match="empty entry"):
        match_interfaces("ib0,,ib1", NAMES)
    with pytest.raises(ValueError, match="empty entry"):
        match_gloo_interfaces("eth0,", NAMES)


def test_gloo_takes_exact_names_only() -> None:
    assert match_gloo_interfaces("eth0,ib1", NAMES) == ["eth0", "ib1"]
    assert match_gloo_interfaces("eth", NAMES) == []


@given(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True), st.booleans())
def test_exclusion_is_the_complement(prefixes: list[str], exact: bool) -> None:
    spec = ("=" if exact else "") + ",".join(prefixes)
    selected = match_interfaces(spec, NAMES)
    assert sorted(selected + match_interfaces("^" + spec, NAMES)) == sorted(NAMES)
    assert parse_spec("^" + spec).exclude and parse_spec(spec).exact == exact
