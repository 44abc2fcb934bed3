"""lib/grouping.by_node: ranks by node, the last answer for a list of ranks kept for the next check."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from preflight.lib.grouping import _largest_where, by_node, grouped, ranks_per_host, where_text
from preflight.model import RankFacts, World
from tests.fuzz.strategies import FUZZ


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


@FUZZ
@given(hosts=st.lists(st.sampled_from("abcdef"), min_size=1, max_size=40), keys=st.data())
def test_the_largest_groups_hosts_counted_from_the_others_are_where_texts(hosts: list[str], keys) -> None:
    """describe's first group: its hosts counted from the other groups' where they are all of the ranks,
    as where_text counts them over the group itself; and where they are not (a group left out), where_text's."""
    ranks = [_rank(rank, host) for rank, host in enumerate(hosts)]
    values = keys.draw(st.lists(st.sampled_from("xyz"), min_size=len(ranks), max_size=len(ranks)))
    groups = grouped(ranks, values)
    (_, first), *others = groups.items()
    assert _largest_where(first, others, ranks) == where_text(first, ranks, count_only=True)
    assert _largest_where(first, others[1:], ranks) == where_text(first, ranks, count_only=True)
    ranks_per_host.forget()
