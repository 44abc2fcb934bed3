"""Judgment: largest size only, siblings' median, cross-dimension suspects, expectations, pairs."""

from __future__ import annotations

from preflight.model import ProbeResult
from preflight.probes import judge
from preflight.probes.pairwise import judge_pairs, round_robin


def _r(dim: str, group: int, ranks: list[int], busbw: float, size: int = 100, op: str = "all_reduce",
       spread: float = 0.02) -> ProbeResult:
    """A result with 5 timed iterations within +-spread of its median."""
    iters = [busbw * (1 + spread * k) for k in (-2, -1, 0, 1, 2)]
    return ProbeResult(dim, op, size, group, ranks, [f"h{r}" for r in ranks], 1.0, busbw, busbw,
                       iter_busbw_gbps=iters)


def test_only_the_largest_size_is_judged() -> None:
    results = [_r("tp", 0, [0, 1], 1.0, size=10), _r("tp", 1, [2, 3], 10.0, size=10),
               _r("tp", 0, [0, 1], 10.0), _r("tp", 1, [2, 3], 9.0)]
    assert judge.stragglers(results, 0.8) == []


def test_straggler_against_siblings_median() -> None:
    results = [_r("dp", i, [i, i + 4], bw) for i, bw in enumerate([10.0, 9.5, 10.5, 7.0])]
    slow = judge.stragglers(results, 0.8)
    assert [(s.group_index, s.ranks) for s in slow] == [(3, [3, 7])]
    assert slow[0].siblings_median_gbps == 10.0 and slow[0].ratio == 0.7
    assert slow[0].false_alarm_p == 1 / 15504  # 5 iterations below all 15 of three siblings


def test_a_gap_the_spread_explains_is_not_a_straggler() -> None:
    # Same medians as above, but one iteration of the slow group was as fast as a sibling's.
    noisy = [_r("dp", i, [i, i + 4], bw, spread=0.2) for i, bw in enumerate([10.0, 9.5, 10.5, 7.0])]
    assert judge.stragglers(noisy, 0.8) == []
    assert max(noisy[3].iter_busbw_gbps) >= min(noisy[0].iter_busbw_gbps)


def test_too_few_iterations_name_nobody() -> None:
    # One figure per group: a complete separation of 1 against 1 happens half the time by chance.
    results = [ProbeResult("tp", "all_reduce", 100, g, [g], ["h"], 1.0, bw, bw) for g, bw in enumerate([10.0, 1.0])]
    assert judge.false_alarm_p(1, 1) == 0.5 and judge.stragglers(results, 0.8) == []
    assert judge.false_alarm_p(5, 5) == 1 / 252


def test_two_slow_groups_do_not_hide_each_other() -> None:
    results = [_r("dp", i, [i], bw) for i, bw in enumerate([10.0, 10.2, 9.9, 3.0, 2.0, 10.1])]
    assert sorted(s.group_index for s in judge.stragglers(results, 0.8)) == [3, 4]


def test_confirm_keeps_only_what_the_second_pass_finds_again() -> None:
    first = [_r("dp", i, [i], bw) for i, bw in enumerate([10.0, 10.0, 10.0, 5.0])]
    first += [_r("tp", i, [i], bw) for i, bw in enumerate([10.0, 4.0])]
    second = [_r("dp", i, [i], bw) for i, bw in enumerate([10.0, 10.0, 10.0, 4.5])]
    second += [_r("tp", i, [i], bw) for i, bw in enumerate([10.0, 9.8])]  # tp's gap was noise
    kept = judge.confirm(judge.stragglers(first, 0.8), second, 0.8)
    assert [(s.dim, s.group_index) for s in kept] == [("dp", 3)]
    assert kept[0].busbw_gbps == 5.0 and kept[0].confirm_busbw_gbps == 4.5
    assert kept[0].iters == 5 and kept[0].confirm_calls == 5  # the second pass's calls (the finding says it)
    again = judge.confirm(judge.stragglers(first, 0.8), second, 0.8, calls_per_figure=4)
    assert again[0].confirm_calls == 20


def test_single_group_has_no_siblings() -> None:
    assert judge.stragglers([_r("world", 0, [0, 1, 2, 3], 0.001)], 0.8) == []


def test_rank_in_slow_groups_of_two_dims_is_suspect() -> None:
    results = [_r("tp", 0, [0, 1], 10.0), _r("tp", 1, [2, 3], 2.0), _r("pp", 0, [0, 2], 10.0),
               _r("pp", 1, [1, 3], 2.0)]
    assert judge.cross_dim_suspects(judge.stragglers(results, 0.8)) == {3: ["pp", "tp"]}


def test_below_expected_at_ninety_percent() -> None:
    results = [_r("tp", 0, [0, 1], 271.0), _r("tp", 1, [2, 3], 269.0), _r("dp", 0, [0, 2], 1.0)]
    low = judge.below_expected(results, {"tp": 300.0})
    assert [b.result.group_index for b in low] == [1]


def test_spanning_groups_and_intra_host_dim() -> None:
    hosts = {0: "a", 1: "a", 2: "a", 3: "b"}
    assert judge.spanning_groups([[0, 1], [2, 3]], hosts) == [(1, [2, 3], ["a", "b"])]
    assert judge.intra_host_dim(["pp", "tp"]) == "tp"
    assert judge.intra_host_dim(["pp", "cp"]) == "cp"
    assert judge.intra_host_dim(["world"]) is None


def test_round_robin_covers_every_pair_once_in_disjoint_rounds() -> None:
    for ranks in ([0, 1, 2, 3], [4, 5, 6, 7, 8]):
        rounds = round_robin(ranks)
        assert len(rounds) == len(ranks) - (len(ranks) + 1) % 2  # n-1 rounds (n rounds when odd)
        pairs = [p for r in rounds for p in r]
        assert len(pairs) == len(set(pairs)) == len(ranks) * (len(ranks) - 1) // 2
        for r in rounds:
            members = [x for p in r for x in p]
            assert len(members) == len(set(members))


def test_pairs_name_the_slow_host_then_a_slow_link() -> None:
    pairs = {(0, 1): 10.0, (0, 2): 10.0, (1, 2): 10.0, (0, 3): 1.0, (1, 3): 1.1, (2, 3): 0.9}
    found = judge_pairs(pairs, 0.8)
    assert list(found.slow_ranks) == [3] and found.slow_links == {}
    pairs = {(0, 1): 10.0, (0, 2): 10.0, (1, 2): 10.0, (0, 3): 10.0, (1, 3): 10.0, (2, 3): 1.0}
    found = judge_pairs(pairs, 0.8)
    assert found.slow_ranks == {} and list(found.slow_links) == [(2, 3)]
