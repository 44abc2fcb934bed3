"""Slurm's task layout: compressed tasks-per-node counts and block / cyclic placement."""

from __future__ import annotations

import pytest

from preflight.lib.errors import BadInput
from preflight.lib.slurm_layout import parse_tasks_per_node, slurm_rank_hosts


def test_slurm_uneven_tasks() -> None:
    assert parse_tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_a_repeat_count_beyond_the_host_limit_is_refused_before_expansion() -> None:
    with pytest.raises(BadInput, match="names more than"):
        parse_tasks_per_node("1(x999999999)")


def test_block_fills_node_by_node_and_cyclic_deals_round_robin() -> None:
    assert slurm_rank_hosts(["a", "b"], [2, 1], "block") == {0: "a", 1: "a", 2: "b"}
    assert slurm_rank_hosts(["a", "b"], [2, 1], "cyclic") == {0: "a", 1: "b", 2: "a"}
