"""lib/grouping.by_node: ranks by node, the last answer for a list of ranks kept for the next check."""

from __future__ import annotations

from preflight.lib.grouping import by_node
from preflight.model import RankFacts, World


def _rank(rank: int, host: str) -> RankFacts:
    return RankFacts(rank=rank, host=host, world=World(launcher="slurm", rank=rank, world_size=8))


def test_by_node_groups_in_rank_order_and_answers_a_changed_list_anew() -> None:
    ranks = [_rank(3, "b"), _rank(0, "a"), _rank(2, "b"), _rank(1, "a")]
    nodes = by_node(ranks)
    assert {key: [f.rank for f in members] for key, members in nodes.items()} == {("a", -1): [0, 1], ("b", -1): [2, 3]}
    assert by_node(ranks) is nodes  # the same list again: the kept answer
    ranks.append(_rank(4, "c"))
    assert [key for key in by_node(ranks)] == [("a", -1), ("b", -1), ("c", -1)]
    assert list(by_node(iter(ranks[:2]))) == [("a", -1), ("b", -1)]  # an iterator: grouped, never kept
    assert list(by_node(ranks)) == [("a", -1), ("b", -1), ("c", -1)]
