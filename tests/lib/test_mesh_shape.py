"""--mesh parsing: dims outermost first, dp remainder after pp, wildcards, arithmetic in errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preflight.lib.errors import BadInput
from preflight.lib.mesh_shape import MeshDim, dim_groups, mesh_text, parse_mesh_syntax, resolve_mesh


def test_exact_mesh_is_kept_outermost_first() -> None:
    assert mesh_text(resolve_mesh("pp2,tp4", 8)) == "pp2,tp4"


def test_remainder_becomes_dp_right_after_pp() -> None:
    assert mesh_text(resolve_mesh("pp2,tp4", 16)) == "pp2,dp2,tp4"


def test_remainder_is_outermost_without_pp() -> None:
    assert mesh_text(resolve_mesh("cp2,tp2", 16)) == "dp4,cp2,tp2"


def test_wildcard_places_the_remainder() -> None:
    assert mesh_text(resolve_mesh("pp2,tp2,dp_shard*", 16)) == "pp2,tp2,dp_shard4"
    assert mesh_text(resolve_mesh("dp-1,ep2", 8)) == "dp4,ep2"


def test_any_identifier_is_a_dimension() -> None:
    assert resolve_mesh("stage2,expert_x2", 4) == [MeshDim("stage", 2), MeshDim("expert_x", 2)]


@pytest.mark.parametrize(("text", "world", "words"), [
    ("pp2,tp3", 16, ["product", "6", "does not divide WORLD_SIZE 16"]),
    ("pp0,tp4", 8, ["size 0"]),
    ("tp2,tp2", 8, ["tp appears twice"]),
    ("dp*,cp-1", 8, ["two wildcard"]),
    ("pp2,,tp4", 8, ["is not NAME<size>"]),
    ("2pp", 8, ["is not NAME<size>"]),
    ("tp4x", 8, ["is not NAME<size>"]),
    ("dp2,tp2", 8, ["dp is already given"]),
])
def test_bad_mesh_says_why(text: str, world: int, words: list[str]) -> None:
    with pytest.raises(BadInput) as caught:
        resolve_mesh(text, world)
    for word in words:
        assert word in str(caught.value)


def test_groups_follow_init_device_mesh_layout() -> None:
    groups = dim_groups(resolve_mesh("pp2,tp2", 4))
    assert groups == {"pp": [[0, 2], [1, 3]], "tp": [[0, 1], [2, 3]]}
    groups = dim_groups(resolve_mesh("dp2,tp4", 8))
    assert groups["tp"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert groups["dp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


@given(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=3, unique=False), st.integers(1, 4))
def test_resolved_mesh_always_covers_the_world(sizes: list[int], extra: int) -> None:
    names = ["pp", "cp", "tp"][: len(sizes)]
    text = ",".join(f"{n}{s}" for n, s in zip(names, sizes))
    world = math.prod(sizes) * extra
    dims = resolve_mesh(text, world)
    assert math.prod(d.size for d in dims) == world
    for groups in dim_groups(dims).values():
        assert sorted(r for g in groups for r in g) == list(range(world))


@given(st.text(max_size=12))
def test_garbage_is_bad_input_or_a_mesh(text: str) -> None:
    try:
        dims = parse_mesh_syntax(text)
    except BadInput:
        return
    assert all(d.size != 0 for d in dims)
