"""Slurm hostlist expansion and compression, by hand and by property."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preflight.lib.errors import BadInput
from preflight.lib.hostlist import compress_hostlist, expand_hostlist


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("gpu[001-004,010],login1", ["gpu001", "gpu002", "gpu003", "gpu004", "gpu010", "login1"]),
        ("node1", ["node1"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a[08-11]-ib", ["a08-ib", "a09-ib", "a10-ib", "a11-ib"]),
        ("x,y", ["x", "y"]),
        ("", []),
    ],
)
def test_expand(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["gpu[1-", "gpu]1", "gpu[a-b]", "gpu[5-1]", "a,,b", "a[[1]]"])
def test_expand_rejects_garbage(text: str) -> None:
    with pytest.raises(BadInput):
        expand_hostlist(text)


def test_compress_examples() -> None:
    assert compress_hostlist(["gpu001", "gpu002", "gpu003", "gpu004", "gpu010", "login1"]) == (
        "gpu[001-004,010],login1"
    )
    assert compress_hostlist(["node07"]) == "node07"
    assert compress_hostlist(["vm"]) == "vm"
    assert compress_hostlist([]) == ""


names = st.lists(
    st.builds(lambda p, n, w: f"{p}{str(n).zfill(w)}", st.sampled_from(["gpu", "node", "a-b"]),
              st.integers(0, 300), st.sampled_from([0, 3])),
    min_size=1, max_size=40,
)


@given(names)
def test_compress_then_expand_is_identity(hosts: list[str]) -> None:
    assert sorted(expand_hostlist(compress_hostlist(hosts))) == sorted(set(hosts))
