"""Compact "value -> hosts/ranks" summaries that cross-rank checks put in their messages.

A cross-rank check over 4096 ranks must still produce a few short lines: values are grouped,
the most common one is summarised by its host count, and the others name their hosts (and
ranks, where a value does not cover whole hosts). Imported by check modules only.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from preflight.lib.hostlist import host_ranges, rank_ranges
from preflight.model import NetworkFacts, RankFacts, table_ranks

K = TypeVar("K", bound=Hashable)
H = TypeVar("H", bound=Hashable)
V = TypeVar("V", bound=Hashable)
R = TypeVar("R")


def group_by(ranks: Iterable[RankFacts], key: Callable[[RankFacts], K]) -> dict[K, list[RankFacts]]:
    """Ranks grouped by key(facts), largest group first (ties: by key text)."""
    ranks = ranks if isinstance(ranks, Sequence) else list(ranks)
    return grouped(ranks, map(key, ranks))


def grouped(ranks: Iterable[R], keys: Iterable[K]) -> dict[K, list[R]]:
    """Ranks (or their rows) grouped by their keys (given in the same order), largest group first (ties:
    by key text): group_by for keys a caller already read."""
    groups: dict[K, list[R]] = defaultdict(list)
    for facts, value in zip(ranks, keys, strict=True):
        groups[value].append(facts)
    return dict(sorted(groups.items(), key=lambda item: (-len(item[1]), str(item[0]))))


def all_alike(ranks: Iterable[RankFacts], key: Callable[[RankFacts], Hashable]) -> bool:
    """Whether key(facts) is one value on every rank: a check that compares a field across ranks
    skips grouping them when it is (with an operator.attrgetter the pass runs in C)."""
    return len(set(map(key, ranks))) <= 1


def odd_ones(values: Mapping[H, V]) -> tuple[V, dict[H, V]]:
    """The most common value (majority_of) and the keys whose value differs from it."""
    majority = majority_of(Counter(values.values()))
    return majority, {key: v for key, v in values.items() if v != majority}


def majority_of(counts: Counter[V]) -> V:
    """The most common of the counted values (ties: the larger text)."""
    return max(counts, key=lambda v: (counts[v], str(v)))


def where_text(group: Sequence[RankFacts], all_ranks: Sequence[RankFacts], count_only: bool = False) -> str:
    """`node07`, `14 hosts`, or `node07 (ranks 3,5)` when the group does not cover whole hosts.

    count_only (the most common value): just the host count, never rank detail. On a one-host job
    hosts tell no group apart, so ranks do: `ranks 0-1,3`, `rank 2`."""
    hosts = set(map(host_of, group))
    per_host = ranks_per_host(all_ranks)
    if len(per_host) <= 1:
        return f"{'rank' if len(group) == 1 else 'ranks'} {rank_ranges(f.rank for f in group)}"
    if count_only and len(hosts) > 1:
        return f"{len(hosts)} hosts"
    place = host_ranges(hosts)
    on_hosts = sum(per_host[host] for host in hosts)
    if count_only or on_hosts == len(group):
        return place
    if len(hosts) > 3:  # scattered over many hosts: counts say more than a cut list
        return f"{len(group)} ranks of {len(hosts)} hosts"
    label = "rank" if len(group) == 1 else "ranks"
    return f"{place} ({label} {rank_ranges(f.rank for f in group)})"


def describe(groups: dict[K, list[RankFacts]], all_ranks: Sequence[RankFacts],
             label: Callable[[K], str], limit: int = 3) -> str:
    """`\\`mlx5_0\\` on 14 hosts, unset on node07`: the first (largest) group by count only."""
    parts = []
    items = list(groups.items())
    for index, (value, group) in enumerate(items[:limit]):
        where = _largest_where(group, items[1:], all_ranks) if index == 0 else where_text(group, all_ranks)
        parts.append(f"{label(value)} on {where}")
    rest = items[limit:]
    if rest:
        others = sum(len(group) for _, group in rest)
        parts.append(f"{len(rest)} other value(s) on {others} rank(s)")
    return ", ".join(parts)


def _largest_where(group: Sequence[RankFacts], others: Sequence[tuple[K, list[RankFacts]]],
                   all_ranks: Sequence[RankFacts]) -> str:
    """where_text(group, all_ranks, count_only=True) of the largest group, its hosts counted from the other
    (small) groups' where the groups are all of `all_ranks`: a host is outside it only when every one of its
    ranks is in another group. One pass over the few ranks of the others, not over the 131,072 of it."""
    per_host = ranks_per_host(all_ranks)
    if len(per_host) > 1 and len(group) + sum(len(members) for _, members in others) == len(all_ranks):
        in_others = Counter(host_of(facts) for _, members in others for facts in members)
        hosts = len(per_host) - sum(1 for host, count in in_others.items() if count == per_host[host])
        if hosts > 1:
            return f"{hosts} hosts"
    return where_text(group, all_ranks, count_only=True)


def minority(groups: dict[K, list[RankFacts]]) -> list[RankFacts]:
    """Every rank outside the largest group: the ones a finding names."""
    return [facts for group in list(groups.values())[1:] for facts in group]


def short(value: str, limit: int = 32) -> str:
    """A value cut to `limit` characters, in backticks."""
    text = value if len(value) <= limit else value[: limit - 3] + "..."
    return f"`{text}`"


NodeKey = tuple[str, int]  # (host, node rank); node rank -1 where the launcher does not name nodes


rank_number = operator.attrgetter("rank")  # a rank's number, read in C (sorted's key: no Python call per rank)
host_of = operator.attrgetter("host")  # a rank's host, read in C


def node_key(facts: RankFacts) -> NodeKey:
    """Which node a rank runs on: its host, and the node rank where the launcher names one.

    Two torchrun agents on one machine, or containers that share one hostname, are different
    nodes when the launcher says so (GROUP_RANK, SLURM_NODEID, PET_NODE_RANK differ)."""
    world = facts.world
    return (facts.host, world.node_rank if world.node_rank_given else -1)


def node_label(key: NodeKey) -> str:
    """`node07`, or `vm (node 1)` when the node rank tells nodes of one host name apart."""
    host, node = key
    return host if node < 0 else f"{host} (node {node})"


class LastAnswerKept(Generic[R]):
    """A function of a job's ranks with its last answer kept for the same list (the same object, the
    same length): the cross checks and the renderers ask about one job's ranks several times, and
    each answer is O(N) (0.15 s at 131,072 ranks). The answer is read-only to its callers."""

    def __init__(self, compute: Callable[[Sequence[RankFacts]], R]) -> None:
        self._compute = compute
        self._last: tuple[Sequence[RankFacts], int, R] | None = None
        functools.update_wrapper(self, compute)

    def __call__(self, ranks: Sequence[RankFacts]) -> R:
        last = self._last
        if last is not None and last[0] is ranks and last[1] == len(ranks):
            return last[2]
        answer = self._compute(ranks)
        if isinstance(ranks, Sequence):  # an iterator cannot be asked about again
            self._last = (ranks, len(ranks), answer)
        return answer

    def forget(self) -> None:
        """Drop the kept answer (tests that compare two computations)."""
        self._last = None


# Each rank's number and host, by row (model/table_ranks.py), kept: the text, terminal and HTML views each
# ask for one report's, several times (at 131,072 ranks each pass over them is ~10 ms). Read-only.
numbers_by_row = LastAnswerKept(table_ranks.rank_numbers)
hosts_by_row = LastAnswerKept(table_ranks.hosts)


@LastAnswerKept
def ranks_per_host(ranks: Sequence[RankFacts]) -> Counter[str]:
    """How many of these ranks each host holds (read-only; the last answer is kept: each finding's text asks
    about the job's ranks, where_text). A loaded report's from its host column: no RankFacts built."""
    return Counter(hosts_by_row(ranks))


@LastAnswerKept
def by_node(ranks: Iterable[RankFacts]) -> dict[NodeKey, list[RankFacts]]:
    """Ranks grouped by node_key, in rank order within a node, nodes in key order (read-only; the
    last answer is kept: four cross checks group the job's ranks by node)."""
    nodes: dict[NodeKey, list[RankFacts]] = defaultdict(list)
    for facts in sorted(ranks, key=rank_number):
        nodes[node_key(facts)].append(facts)
    return dict(sorted(nodes.items()))


@LastAnswerKept
def first_per_host(ranks: Sequence[RankFacts]) -> dict[str, RankFacts]:
    """One rank's facts per host (the lowest rank): the ranks of a host share its interfaces, ports and
    clock (read-only; the last answer is kept: NET005, NET006 and CLK002 ask)."""
    chosen: dict[str, RankFacts] = {}
    for facts in sorted(ranks, key=rank_number):
        chosen.setdefault(facts.host, facts)
    return chosen


@LastAnswerKept
def distinct_networks(ranks: Sequence[RankFacts]) -> list[NetworkFacts]:
    """The job's network sections, each object once: rank 0 holds one per host that its ranks share
    (16,384 at 131,072 ranks), so a check of what every rank resolved looks at each once first (ENV002,
    NET004). Read-only; the last answer is kept."""
    return list({id(facts.network): facts.network for facts in ranks}.values())


def shared_host_names(ranks: Iterable[RankFacts]) -> dict[str, list[NodeKey]]:
    """Host names that more than one node reports (only where the launcher names nodes)."""
    nodes_of: dict[str, set[NodeKey]] = defaultdict(set)
    for key in by_node(ranks):  # its nodes (kept: one key a node, not a node_key per rank)
        nodes_of[key[0]].add(key)
    return {host: sorted(keys) for host, keys in sorted(nodes_of.items()) if len(keys) > 1}
